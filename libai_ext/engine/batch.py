"""Turn a batch of local ``DistTensorData`` fields into global tensors, all from stage 0.

Stock LiBai makes each field global directly on the placement of its
``placement_idx``, so each field keeps the local data of a *different* stage:
images (idx 0) keep stage 0's augmentation, labels (idx -1) the last stage's.
Here every field first becomes global on stage 0, the one source of truth, and
only then moves to its own stage.  Fields already on stage 0 cost nothing extra;
every other field costs one stage-to-stage transfer.

``device_type`` is LiBai main's ``train.input_placement_device`` (``None`` on 0.1.1: the
layout's device): as in main's stock ``get_batch``, mixup runs on that device and every
field's placement is of that device kind.

Mixup: in ``train.randomness="layout_invariant"`` (the default) it mixes the global stage-0
batch (``global_mixup``: partners and λ independent of the data-parallel split); in
``"fast"`` it mixes each rank's local batch, as stock LiBai does.
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


def field_to_stage0(tensor, field, name, device_type=None):
    """``tensor`` global on stage 0 with the field's sbp (its target checked first)."""
    placement_of(field.placement_idx, name, device_type)
    sbp = nd_sbp_from_names(field.sbp_list, name)
    return tensor.to_global(sbp=sbp, placement=layout.layer_placement(0, device_type))


def stage0_to_field_stage(tensor, field, name, device_type=None):
    """A stage-0 global ``tensor`` with the field's sbp, moved to the field's stage."""
    sbp = nd_sbp_from_names(field.sbp_list, name)
    target = placement_of(field.placement_idx, name, device_type)
    tensor = tensor.to_global(sbp=sbp, placement=tensor.placement)
    if target != tensor.placement:
        tensor = tensor.to_global(sbp=sbp, placement=target)
    return tensor


def field_to_global_via_stage0(tensor, field, name, device_type=None):
    """Make ``tensor`` global on stage 0 with the field's sbp, then move it to the field's stage."""
    return stage0_to_field_stage(field_to_stage0(tensor, field, name, device_type), field, name, device_type)


def fields_to_global(tensors, fields, global_mixup=None, device_type=None):
    """Every local field global on stage 0, mixed there by ``global_mixup`` if any, then on its stage."""
    if global_mixup is None:
        return {name: field_to_global_via_stage0(tensors[name], fields[name], name, device_type) for name in fields}
    stage0 = {name: field_to_stage0(tensors[name], fields[name], name, device_type) for name in fields}
    stage0["images"], stage0["labels"] = global_mixup(stage0["images"], stage0["labels"])
    return {name: stage0_to_field_stage(stage0[name], fields[name], name, device_type) for name in fields}


def check_mixup_fields(names, mixup_func):
    """LiBai's convention: mixup rewrites ``images`` and ``labels`` together."""
    missing = [k for k in ("images", "labels") if k not in names]
    if mixup_func is not None and missing:
        raise KeyError(f"mixup_func is set but the batch has no field {missing[0]!r} (fields: {sorted(names)})")


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


def consistent_batch(data, mixup_func=None, device_type=None):
    """The body of ``ConsistentBatchTrainer.get_batch``; leaves ``data`` unaltered."""
    reraise_worker_error(data)
    fields = check_fields(data)
    check_mixup_fields(fields, mixup_func)
    local_mixup, global_mixup = split_mixup(mixup_func)
    tensors = apply_mixup({name: field.tensor for name, field in fields.items()}, local_mixup, device_type)
    return fields_to_global(tensors, fields, global_mixup, device_type)
