"""LiBai main (0.2.0, built from source): what differs from 0.1.1 for the plugin.

* ``get_batch(cls, data, input_placement_device="cuda", mixup_func=None)``, called positionally by the trainers
  (``data, input_placement_device, mixup_func``) and the evaluator (``data, input_placement_device``).
* Stock ``get_batch`` takes every field from stage 0 (LiBai #255), and ``get_data_parallel_rank()`` is the stage-0
  placement's data-parallel index: both halves of the bug are fixed. Resuming still drops ``consumed_samples``.
* ``DefaultTrainer`` reads ``train.rdma_enabled`` and ``train.input_placement_device`` with no default;
  ``setup_dist_util`` reads ``train.dist.device_type`` (default ``"cuda"``).
"""
import oneflow as flow

from libai.config import try_get_key

NAME = "LiBai main"
GET_BATCH_ARGUMENTS = ("input_placement_device", "mixup_func")
STOCK_BATCH_FROM_STAGE0 = True


def host_device_type():
    """The device kind a user of this host trains on.  A config value, not a patch decision."""
    return "cuda" if flow.cuda.is_available() else "cpu"


def missing_config_keys(cfg):
    """``{dotted key: value}`` for each key LiBai main needs that ``cfg`` (an 0.1.1-style config) lacks.

    ``train.rdma_enabled``: False (``flow.env.init_rdma`` fails without InfiniBand; 0.1.1 configs never ask for RDMA).
    ``train.dist.device_type``: the host's device kind (LiBai turns its default ``"cuda"`` into ``"cpu"`` anyway).
    ``train.input_placement_device``: the same, so the inputs live where the model does (as in 0.1.1).
    """
    missing = {}
    if try_get_key(cfg, "train.rdma_enabled") is None:
        missing["train.rdma_enabled"] = False
    device = try_get_key(cfg, "train.dist.device_type")
    if device is None:
        device = missing["train.dist.device_type"] = host_device_type()
    if try_get_key(cfg, "train.input_placement_device") is None:
        missing["train.input_placement_device"] = device
    return missing
