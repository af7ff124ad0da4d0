"""The batch path: a batch of local ``DistTensorData`` fields made global tensors, all from stage 0
(``consistent_batch``, the body of ``ConsistentBatchTrainer.get_batch``; docs/the-bug.md), and the train loader
that reads on stage 0 only (``Stage0OnlyLoader``).

Stock LiBai makes each field global directly on the placement of its ``placement_idx``, so images keep stage 0's
augmentation and labels the last stage's.  Here every field becomes global on stage 0 first, then moves to its own
stage (one stage-to-stage transfer for a field not on stage 0).  ``device_type`` is LiBai main's
``train.input_placement_device`` (``None`` on 0.1.1: the layout's device), honoured as main's stock does.  Mixup
mixes the global stage-0 batch under ``train.randomness="layout_invariant"`` (``global_mixup``), each rank's local
batch under ``"fast"``, as stock does.

Stage-0-only loading (docs/usage.md): every field's data comes from stage 0, so what other stages would read is
thrown away.  ``Stage0OnlyLoader`` broadcasts the layout of stage 0's first batch once (name, shape, dtype, device,
sbp, placement_idx); the other ranks then yield LiBai ``Instance``s of zero tensors of that layout, which
``to_global`` drops.  Stage 0 is untouched, so its batches are bit-identical to the default path.  Batch shapes must
not change between steps (LiBai's training samplers always yield full micro-batches); evaluation loaders keep the
default path.
"""
import functools
import json

import numpy as np
import oneflow as flow
from libai.config import try_get_key
from libai.data.structures import DistTensorData, Instance
from libai.utils import distributed as dist

from ..compat import layout
from ..random.global_mixup import split_mixup

_WORKER_ERROR = flow.utils.data._utils.worker.ExceptionWrapper


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
    if isinstance(data, _WORKER_ERROR):
        data.reraise()


@functools.lru_cache(maxsize=16)
def _targets(dist_util, device_type, fields):
    """``(stage 0's placement, {field: (its placement, its nd-sbp)})`` of ``fields``' ``(name, placement_idx,
    sbp_list)`` in the layout of ``dist_util`` (LiBai's, made anew by each ``setup_dist_util``)."""
    targets = {}
    for name, placement_idx, sbp_list in fields:
        targets[name] = placement_of(placement_idx, name, device_type), nd_sbp_from_names(sbp_list, name)
    return layout.layer_placement(0, device_type), targets


def consistent_batch(data, mixup_func=None, device_type=None, step=None):
    """The body of ``ConsistentBatchTrainer.get_batch``: ``{field: global tensor}`` of LiBai's ``Instance`` ``data``
    (left unaltered), every field made global on stage 0, mixed there, then moved to its own stage.

    ``step``: the training step (``random.draws.Step``) a global mixup is keyed by.  A step's joined micro-batches
    (``step_batches.StepBatchLoader``) are made global once, at their first micro-step, and each micro-step gets
    its rows (``micro_rows``).
    """
    if isinstance(data, _WORKER_ERROR):
        data.reraise()
    micro_batches = getattr(data, "_micro_batches", 1)
    batch = getattr(data, "_global", None)
    if batch is None:
        # Checked inline, the messages made where a check fails: this runs at every step.
        fields, names = data.get_fields(), []
        for name, field in fields.items():
            if not isinstance(field, DistTensorData) or not isinstance(field.tensor, flow.Tensor) or \
                    type(field.placement_idx) is not int:
                check_fields(data)
                placement_of(field.placement_idx, name, device_type)
            names.append((name, field.placement_idx, tuple(field.sbp_list)))
        if mixup_func is not None and ("images" not in fields or "labels" not in fields):
            check_mixup_fields(fields, mixup_func)
        local_mixup, global_mixup = split_mixup(mixup_func, None if step is None else step.mode)
        mixed = None if local_mixup is None else apply_mixup(
            {name: field.tensor for name, field in fields.items()}, local_mixup, device_type)
        stage0, targets = _targets(dist.get_dist_util(), device_type, tuple(names))
        batch = {}
        for name, field in fields.items():
            batch[name] = (field.tensor if mixed is None else mixed[name]).to_global(sbp=targets[name][1],
                                                                                   placement=stage0)
        if global_mixup is not None:
            batch["images"], batch["labels"] = global_mixup(batch["images"], batch["labels"], step)
        for name, tensor in batch.items():
            placement, sbp = targets[name]
            if global_mixup is not None:
                tensor = tensor.to_global(sbp=sbp, placement=stage0)
            batch[name] = tensor if placement == stage0 else tensor.to_global(sbp=sbp, placement=placement)
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


_LAYOUT_BYTES = 8192


def on_stage0():
    return flow.env.get_rank() in dist.get_layer_placement(0).ranks.flatten().tolist()


def stage0_only_loading(cfg):
    """Whether the train loader reads on stage 0 only (``train.stage0_only_loading``, on by default, under pipeline
    parallelism)."""
    return bool(try_get_key(cfg, "train.stage0_only_loading", default=True)) and \
        dist.get_dist_util().pipeline_parallel_size > 1


class Stage0OnlyLoader:
    """Wraps a train loader; on ranks outside stage 0 it never iterates it."""

    def __init__(self, loader):
        self.loader = loader
        self.dataset = loader.dataset  # LiBai sizes epochs from len(dataset)
        self.reads_data = on_stage0()
        # Every rank keeps it: the trainer passes it back to get_batch, where a global mixup
        # needs it on every rank (a local one changes nothing the placeholders send).
        self.mixup_func = getattr(loader, "mixup_func", None)
        self.layout = None

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        batches = iter(self.loader) if self.reads_data else None
        while True:
            batch = layout = None
            if batches is not None:
                batch = next(batches, None)
                if batch is None:
                    return
                if not isinstance(batch, _WORKER_ERROR):  # (a loader worker's error: get_batch raises it)
                    layout = {}
                    for name, field in batch.get_fields().items():
                        if not isinstance(field, DistTensorData) or not isinstance(field.tensor, flow.Tensor):
                            check_fields(batch)
                        tensor = field.tensor
                        layout[name] = {"shape": list(tensor.shape), "dtype": str(tensor.dtype),
                                        "device": tensor.device.type, "sbp_list": list(field.sbp_list),
                                        "placement_idx": field.placement_idx}
                    if self.layout is not None and layout != self.layout:
                        raise ValueError("stage-0-only loading needs fixed batch shapes; set "
                                         "train.stage0_only_loading=False for this data pipeline")
            if self.layout is None:
                self.layout = broadcast_from_rank0(layout)
                if self.layout is None:
                    raise RuntimeError("stage-0-only loading: rank 0 could not read its first batch (its error is "
                                       "in rank 0's log)")
            yield batch if self.reads_data else Instance(**{
                name: DistTensorData(placeholder(spec), sbp_list=spec["sbp_list"], placement_idx=spec["placement_idx"])
                for name, spec in self.layout.items()})


def placeholder(spec):
    """A local tensor of zeros of a field's layout, on the device stage 0's tensor was on (zeros: a local
    mixup reads class ids from it).

    LiBai's loaders yield CPU tensors, which ``to_global`` copies onto a CUDA placement itself;
    a dataset that yields CUDA tensors gets CUDA placeholders, so every rank hands ``to_global``
    the same kind of tensor.
    """
    dtype = getattr(flow, spec["dtype"].rsplit(".", 1)[-1])  # "oneflow.float32" -> flow.float32
    return flow.zeros(spec["shape"], dtype=dtype, device=spec["device"])


def broadcast_from_rank0(value):
    """A JSON-able ``value`` from rank 0, returned on every rank (one small broadcast).

    On CPU placements on every host, deliberately: the bytes are made and read on the host
    (JSON), once per run; a CUDA placement would only add a copy to the device and back.
    """
    buffer = np.zeros(_LAYOUT_BYTES, dtype=np.uint8)
    if flow.env.get_rank() == 0:
        encoded = json.dumps(value).encode()
        if len(encoded) > _LAYOUT_BYTES:
            raise ValueError(f"batch layout takes {len(encoded)} bytes, more than {_LAYOUT_BYTES}")
        buffer[:len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
    local = flow.tensor(buffer)
    on_rank0 = local.to_global(placement=flow.placement("cpu", [0]), sbp=flow.sbp.broadcast)
    everywhere = on_rank0.to_global(placement=flow.env.all_device_placement("cpu"), sbp=flow.sbp.broadcast)
    return json.loads(everywhere.to_local().numpy().tobytes().rstrip(b"\0").decode())
