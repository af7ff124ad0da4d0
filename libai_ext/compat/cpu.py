"""Let LiBai 0.1.1 train and evaluate on CPU ranks.

Stock LiBai 0.1.1 assumes CUDA in four places that stop a CPU run:

* ``default_setup`` runs ``make`` in the installed ``libai/data/data_utils`` (no
  Makefile ships there): rank 0 exits and the other ranks hang.  The pip install
  already built that helper, so the step is skipped.
* ``dist.ttol`` (used by the metrics writer and the evaluator) and
  ``evaluation.utils.pad_batch`` (the last, incomplete evaluation batch) build
  ``"cuda"`` placements.  Replacements use the tensor's own device type.
* ``libai.layers.LayerNorm`` calls ``flow._C.layer_norm_affine``, whose CPU kernel
  aborts the process; OneFlow's functional ``layer_norm`` computes the same thing
  from CPU-capable ops.

``apply_cpu_patches()`` is explicit, idempotent, and does nothing on a CUDA host.
"""
import logging

import oneflow as flow

logger = logging.getLogger(__name__)

_applied = []


def cpu_patches_applied():
    """Names of the LiBai attributes replaced by ``apply_cpu_patches`` (empty on CUDA hosts)."""
    return list(_applied)


def apply_cpu_patches(force=False):
    """Patch LiBai 0.1.1 for CPU ranks; a no-op where CUDA is available (unless ``force``).

    Returns the list of patched attributes.
    """
    import libai.engine.default as default_module

    if "libai.engine.default._compile_dependencies" not in _applied:
        # The pip sdist ships no Makefile for the helper: this step fails on every host, CUDA too.
        _replace(default_module, "_compile_dependencies", _skip_compile_dependencies)
    if len(_applied) > 1 or (flow.cuda.is_available() and not force):
        return cpu_patches_applied()
    import libai.evaluation.evaluator as evaluator_module
    import libai.evaluation.utils as evaluation_utils
    import libai.layers.layer_norm as layer_norm_module
    import libai.utils.distributed as dist

    _replace(dist, "ttol", global_to_local)
    # The evaluator imported pad_batch by name, so both references are replaced.
    _replace(evaluation_utils, "pad_batch", pad_last_batch)
    _replace(evaluator_module, "pad_batch", pad_last_batch)
    _replace(layer_norm_module.LayerNorm, "forward", _layer_norm_forward)
    return cpu_patches_applied()


def _replace(owner, name, replacement):
    setattr(owner, name, replacement)
    _applied.append(f"{owner.__name__}.{name}")


def _skip_compile_dependencies():
    logger.info("libai_ext: skipping LiBai's dataset helper compile step (built at install time)")


def _device_type(tensor):
    return tensor.placement.type


def global_to_local(tensor, pure_local=False, ranks=None):
    """``libai.utils.distributed.ttol`` without the hard-coded ``"cuda"``.

    ``ranks`` restricts the result to those ranks; unless ``pure_local``, the tensor
    is first broadcast so each of them holds all of it.
    """
    if not tensor.is_global:
        return tensor
    placement = flow.placement(_device_type(tensor), ranks) if ranks else tensor.placement
    if pure_local:
        return tensor.to_global(placement=placement).to_local()
    import libai.utils.distributed as dist

    broadcast = dist.get_nd_sbp([flow.sbp.broadcast, flow.sbp.broadcast])
    return tensor.to_global(sbp=broadcast, placement=placement).to_local()


def pad_last_batch(x_dict, batch_size, last_batch_lack, is_last_batch):
    """``libai.evaluation.utils.pad_batch`` on the tensors' own device type.

    Pads every field of an incomplete evaluation batch to ``batch_size`` rows and
    returns ``(padded_dict, number_of_valid_rows)``.  The rows that the sampler
    added to fill the last data-parallel shards are moved to the end, so the valid
    rows are the first ``number_of_valid_rows``.
    """
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
        device = _device_type(value)
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


def _layer_norm_forward(self, x):
    if x.shape[-len(self.normalized_shape):] != self.normalized_shape:
        raise ValueError(f"LayerNorm expects trailing shape {self.normalized_shape}, got {tuple(x.shape)}")
    return flow.nn.functional.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
