"""The batch path: a batch of local ``DistTensorData`` fields made global tensors, all from stage 0
(``consistent_batch``, the body of ``ConsistentBatchTrainer.get_batch``; docs/the-bug.md).

Stock LiBai makes each field global directly on the placement of its ``placement_idx``, so images keep stage 0's
augmentation and labels the last stage's.  Here every field becomes global on stage 0 first, then moves to its own
stage (one stage-to-stage transfer for a field not on stage 0).  ``device_type`` is LiBai main's
``train.input_placement_device`` (``None`` on 0.1.1: the layout's device), honoured as main's stock does.  Mixup
mixes the global stage-0 batch under ``train.randomness="layout_invariant"`` (``global_mixup``), each rank's local
batch under ``"fast"``, as stock does.
"""
import oneflow as flow
from libai.data.structures import DistTensorData
from libai.utils import distributed as dist

from ..compat import layout
from ..random.global_mixup import split_mixup


def nd_sbp_from_names(sbp_list, field_name):
    """``["split_0", "broadcast"]`` -> the nd-sbp LiBai's layout uses for that field."""
    parsed = []
    for name in sbp_list:
        kind, _, dim = name.partition("_")
        if kind == "split" and dim.isdigit():
            parsed.append(flow.sbp.split(int(dim)))
        elif name == "broadcast":
            parsed.append(flow.sbp.broadcast)
        else:
            raise ValueError(f"batch field {field_name!r}: sbp {name!r} in sbp_list={sbp_list} is not "
                             "'broadcast' or 'split_<dim>'")
    return dist.get_nd_sbp(parsed)


def placement_of(placement_idx, field_name, device_type=None):
    """The placement of layer ``placement_idx``; negative indices count from the last layer."""
    if isinstance(placement_idx, bool) or not isinstance(placement_idx, int):
        raise TypeError(f"batch field {field_name!r}: placement_idx must be an int, got {placement_idx!r}")
    num_layers = len(layout.layer_stage_ids())
    if not -num_layers <= placement_idx < num_layers:
        raise IndexError(
            f"batch field {field_name!r}: placement_idx={placement_idx} is out of range for "
            f"train.dist.pipeline_num_layers={num_layers}")
    return layout.layer_placement(placement_idx, device_type)


def check_fields(data):
    """Every field must be a ``DistTensorData`` holding a local tensor; returns the fields."""
    fields = data.get_fields()
    for name, value in fields.items():
        if not isinstance(value, DistTensorData):
            raise TypeError(
                f"batch field {name!r} is a {type(value).__name__}, not a libai DistTensorData: "
                "wrap it in the dataset's __getitem__ as DistTensorData(tensor, placement_idx=...)")
        if not isinstance(value.tensor, flow.Tensor):
            raise TypeError(f"batch field {name!r}: DistTensorData.tensor is a {type(value.tensor).__name__}")
    return fields


def check_mixup_fields(names, mixup_func):
    """LiBai's convention: mixup rewrites ``images`` and ``labels`` together."""
    for name in ("images", "labels") if mixup_func is not None else ():
        if name not in names:
            raise KeyError(f"mixup_func is set but the batch has no field {name!r} (fields: {sorted(names)})")


def apply_mixup(tensors, mixup_func, device_type=None):
    """Local mixup of ``images`` and ``labels`` (stock LiBai's; the "fast" mode's).

    With a ``device_type`` (LiBai main) they are moved there first, as main's stock does.
    """
    if mixup_func is None:
        return tensors
    check_mixup_fields(tensors, mixup_func)
    tensors = dict(tensors)
    images, labels = tensors["images"], tensors["labels"]
    if device_type is not None:
        device_type = layout.layer_placement(0, device_type).type
        images, labels = images.to(device_type), labels.to(device_type)
    tensors["images"], tensors["labels"] = mixup_func(images, labels)
    return tensors


def reraise_worker_error(data):
    if isinstance(data, flow.utils.data._utils.worker.ExceptionWrapper):
        data.reraise()


def consistent_batch(data, mixup_func=None, device_type=None, step=None):
    """The body of ``ConsistentBatchTrainer.get_batch``: ``{field: global tensor}`` of LiBai's ``Instance`` ``data``
    (left unaltered), every field made global on stage 0, mixed there, then moved to its own stage.

    ``step``: the training step (``random.draws.Step``) a global mixup is keyed by.  A step's joined micro-batches
    (``step_batches.StepBatchLoader``) are made global once, at their first micro-step, and each micro-step gets
    its rows (``micro_rows``).
    """
    reraise_worker_error(data)
    micro_batches = getattr(data, "_micro_batches", 1)
    batch = getattr(data, "_global", None)
    if batch is None:
        fields = check_fields(data)
        check_mixup_fields(fields, mixup_func)
        local_mixup, global_mixup = split_mixup(mixup_func, None if step is None else step.mode)
        mixed = None if local_mixup is None else apply_mixup(
            {name: field.tensor for name, field in fields.items()}, local_mixup, device_type)
        stage0 = layout.layer_placement(0, device_type)
        batch, sbp, targets = {}, {}, {}
        for name, field in fields.items():
            targets[name] = placement_of(field.placement_idx, name, device_type)
            sbp[name] = nd_sbp_from_names(field.sbp_list, name)
            batch[name] = (field.tensor if mixed is None else mixed[name]).to_global(sbp=sbp[name], placement=stage0)
        if global_mixup is not None:
            batch["images"], batch["labels"] = global_mixup(batch["images"], batch["labels"], step)
        for name, tensor in batch.items():
            if global_mixup is not None:
                tensor = tensor.to_global(sbp=sbp[name], placement=stage0)
            batch[name] = tensor if targets[name] == stage0 else tensor.to_global(sbp=sbp[name],
                                                                                 placement=targets[name])
        if micro_batches > 1:
            data._global = batch
    if micro_batches > 1:
        return {name: micro_rows(tensor, data._micro, micro_batches) for name, tensor in batch.items()}
    return batch


def _blocks_along_dim0(tensor):
    """How many data-parallel blocks dim 0 of a global tensor is split into."""
    hierarchy = tensor.placement.ranks.shape
    parts = 1
    for axis, sbp in enumerate(tensor.sbp):
        if sbp == flow.sbp.split(0):
            parts *= hierarchy[axis]
    return parts


def micro_rows(tensor, micro, micro_batches):
    """Rows ``[m * s, (m + 1) * s)`` of each data-parallel block of a global step tensor (no communication)."""
    blocks = _blocks_along_dim0(tensor)
    rows = tensor.shape[0] // (blocks * micro_batches)
    shaped = tensor.reshape(blocks, micro_batches, rows, *tensor.shape[1:])
    return shaped[:, micro].reshape(blocks * rows, *tensor.shape[1:])
