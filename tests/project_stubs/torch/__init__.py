"""A stand-in for the ``import torch`` LiBai's projects make at module level for their PyTorch checkpoint
converters (``projects/*/utils/weight_convert.py``): the tests never convert a checkpoint, and any use of this
module raises."""


def __getattr__(name):
    raise ImportError(f"torch.{name}: libai_ext's tests put a stand-in for torch on the path of LiBai's projects, "
                      "which import it only for their PyTorch weight converters")
