"""LiBai main's HuggingFace loaders reading ``*.safetensors`` weights where PyTorch is not installed.

``ModelLoaderHuggerFace`` (base of Llama's, ChatGLM's, Qwen's and Baichuan's loaders) reads every checkpoint through
``torch``, which a OneFlow installation does not need (docs/upstream-bugs.md #36). Where ``torch`` cannot be imported,
safetensors files are read with ``safetensors.numpy`` and converted as LiBai converts PyTorch's tensors; with torch,
and for ``.bin`` files, LiBai's own code runs. bfloat16 has no numpy type: such a file is refused, naming it.
"""
import numpy as np
import oneflow as flow

from .patching import replace


def torch_usable():
    """Whether ``torch`` imports and has ``load`` (a stand-in module that only satisfies imports has not)."""
    try:
        import torch

        return callable(torch.load)
    except ImportError:
        return False


def read_safetensors(files):
    """``{name: numpy array}`` of the safetensors file or files (float32 for the list, as LiBai's torch path
    converts a list's tensors to float)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    merged = {}
    for path in [files] if isinstance(files, str) else files:
        try:
            arrays = load_file(path)
        except (SafetensorError, TypeError, ValueError) as error:
            raise ValueError(f"{path}: cannot be read without PyTorch ({error}); bfloat16 tensors need torch "
                             "installed, or the file saved in float32/float16") from error
        merged.update({name: array if isinstance(files, str) else array.astype(np.float32)
                       for name, array in arrays.items()})
    return merged


def _reading_safetensors_without_torch(libai_load):
    def _load_torch_state_dict(self, state_dict_file, use_safetensors=False):
        if use_safetensors and not torch_usable():
            return read_safetensors(state_dict_file)
        return libai_load(self, state_dict_file, use_safetensors)

    _load_torch_state_dict.libai_original = libai_load
    return _load_torch_state_dict


def _converting_numpy_arrays(libai_convert):
    def _convert_tensor(self, tensor):
        if isinstance(tensor, np.ndarray):  # what read_safetensors gives; LiBai's own gives torch tensors
            return flow.Tensor(tensor)
        return libai_convert(self, tensor)

    _convert_tensor.libai_original = libai_convert
    return _convert_tensor


def apply():
    """Where LiBai has HuggingFace loaders (LiBai main), on every host (each call checks for torch)."""
    try:
        from libai.models.utils.model_loader.base_loader import ModelLoaderHuggerFace
    except ImportError:  # LiBai 0.1.1 has no model loaders
        return
    why = "LiBai's HuggingFace loaders import torch even for safetensors weights"
    replace(ModelLoaderHuggerFace, "_load_torch_state_dict",
            _reading_safetensors_without_torch(ModelLoaderHuggerFace._load_torch_state_dict), why, patch="hf_weights")
    replace(ModelLoaderHuggerFace, "_convert_tensor",
            _converting_numpy_arrays(ModelLoaderHuggerFace._convert_tensor), why, patch="hf_weights")
