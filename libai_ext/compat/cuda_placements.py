"""LiBai helpers that build ``"cuda"`` placements whatever device the tensor is on (docs/upstream-bugs.md #6).

0.1.1's ``dist.ttol`` (called by the metrics writer and the evaluator) fails on CPU ranks with "Placement is invalid
because there is no device!"; main's takes a ``device`` from its callers and is left alone.
``evaluation.utils.pad_batch`` pads the last, incomplete evaluation batch on ``"cuda"`` on both lines (main's
evaluator never passes its ``device``). The replacements take the device from the tensor at call time, so on CUDA
tensors they do what the originals do.
"""
import oneflow as flow

from . import detect
from .patching import replace


def device_type_of(tensor):
    return tensor.placement.type if tensor.is_global else tensor.device.type


def global_to_local(tensor, pure_local=False, ranks=None):
    """``dist.ttol`` on the tensor's own device type.

    ``ranks`` restricts the result to those ranks; unless ``pure_local``, the tensor is first broadcast so each of them
    holds all of it."""
    if not tensor.is_global:
        return tensor
    placement = flow.placement(device_type_of(tensor), ranks) if ranks else tensor.placement
    if pure_local:
        return tensor.to_global(placement=placement).to_local()
    import libai.utils.distributed as dist

    broadcast = dist.get_nd_sbp([flow.sbp.broadcast, flow.sbp.broadcast])
    return tensor.to_global(sbp=broadcast, placement=placement).to_local()


def pad_last_batch(x_dict, batch_size, last_batch_lack, is_last_batch, device=None):
    """``evaluation.utils.pad_batch`` on the tensors' own device type (``device`` is ignored).

    Returns ``(padded_dict, number_of_valid_rows)``; the filler rows the sampler added to the last data-parallel shards
    move to the end, so the valid rows come first."""
    import libai.utils.distributed as dist

    rows = next(iter(x_dict.values())).shape[0]
    if rows > batch_size:
        raise ValueError(f"evaluation batch has {rows} rows, more than batch_size={batch_size}")
    if rows == batch_size and not is_last_batch:
        return x_dict, batch_size
    dp_size = dist.get_data_parallel_size()
    if rows % dp_size:
        raise ValueError(f"evaluation batch of {rows} rows does not split over {dp_size} data-parallel ranks")
    shard_rows = rows // dp_size
    padded = {}
    for key, value in x_dict.items():
        device = device_type_of(value)
        everywhere = flow.env.all_device_placement(device)
        local = value.to_global(sbp=flow.sbp.broadcast, placement=everywhere).to_local()
        out = flow.zeros((batch_size, *value.shape[1:]), dtype=value.dtype, device=device)
        out[:rows] = local
        # The sampler ended each of the last `last_batch_lack` shards with one filler row.
        # The last shard's filler is already at the end; squeeze the others out, back to front.
        for k in range(1, last_batch_lack):
            filler = shard_rows * (dp_size - k) - 1
            out[filler:-1] = out[filler + 1:].clone()
        replicated = dist.get_nd_sbp([flow.sbp.broadcast, flow.sbp.broadcast])
        padded[key] = out.to_global(sbp=replicated, placement=value.placement).to_global(sbp=value.sbp)
    return padded, rows - last_batch_lack


def apply(ttol_takes_device=None):
    """Replace ``ttol`` where it cannot be told a device, and ``pad_batch`` on every line."""
    import libai.evaluation.evaluator as evaluator_module
    import libai.evaluation.utils as evaluation_utils
    import libai.utils.distributed as dist

    if ttol_takes_device is None:
        ttol_takes_device = detect.ttol_takes_device()
    if not ttol_takes_device:
        replace(dist, "ttol", global_to_local, "ttol hard-codes a 'cuda' placement", patch="cuda_placements")
    # The evaluator imported pad_batch by name, so both references are replaced.
    reason = "pad_batch pads on 'cuda' whatever the batch's device"
    replace(evaluation_utils, "pad_batch", pad_last_batch, reason, patch="cuda_placements")
    replace(evaluator_module, "pad_batch", pad_last_batch, reason, patch="cuda_placements")
