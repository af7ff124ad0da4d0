"""Stage-0-only data loading: ranks outside pipeline stage 0 read and augment nothing.

With ``ConsistentBatchTrainer`` every field's data comes from stage 0, so the samples
other stages read and augment are thrown away.  ``Stage0OnlyLoader`` replaces their
loader: it yields placeholders, never touching the dataset.  At the first step stage 0
broadcasts each field's layout after any local mixup (name, shape, dtype, device, sbp, placement_idx)
once; afterwards the other ranks hand uninitialised tensors of that layout, on the device
stage 0's tensors had, to ``to_global``, which drops them (a global mixup, which mixes after
that, runs on every rank: the layout is then the pre-mixup one).  Stage 0 itself is untouched,
so the batches are bit-identical to the default path.  Batch shapes must not change
between steps (LiBai's training samplers always yield full micro-batches); the
evaluation loaders keep the default path.
"""
import json

import numpy as np
import oneflow as flow
from libai.data.structures import DistTensorData
from libai.utils import distributed as dist

from ..random.global_mixup import split_mixup
from .batch import apply_mixup, check_fields, check_mixup_fields, fields_to_global, reraise_worker_error

_LAYOUT_BYTES = 8192


def on_stage0():
    return flow.env.get_rank() in dist.get_layer_placement(0).ranks.flatten().tolist()


class Stage0Batch:
    """What a ``Stage0OnlyLoader`` yields: a real batch on stage 0, ``None`` elsewhere."""

    def __init__(self, batch, source):
        self.batch = batch
        self.source = source

    def to_global(self, mixup_func=None, device_type=None):
        """The global batch, as ``ConsistentBatchTrainer.get_batch`` returns it."""
        return self.source.global_batch(self, mixup_func, device_type)

    # LiBai main's GraphTrainer concatenates grad_acc_steps micro-batches field by field through
    # these two; outside stage 0 there is nothing to concatenate (the layout says the joined shape).
    def get_fields(self):
        return self.batch.get_fields() if self.batch is not None else {}

    def get(self, key):
        return self.batch.get(key)


class Stage0OnlyLoader:
    """Wraps a train loader; on ranks outside stage 0 it never iterates it."""

    def __init__(self, loader):
        self.loader = loader
        self.dataset = loader.dataset  # LiBai sizes epochs from len(dataset)
        self.reads_data = on_stage0()
        # Every rank keeps it: the trainer passes it back to get_batch, where a global mixup
        # needs it on every rank (a local one is applied where data is read only).
        self.mixup_func = getattr(loader, "mixup_func", None)
        self.layout = None

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        if self.reads_data:
            return (Stage0Batch(batch, self) for batch in self.loader)
        return iter(lambda: Stage0Batch(None, self), None)  # endless placeholders

    def global_batch(self, item, mixup_func, device_type=None):
        local_mixup, global_mixup = split_mixup(mixup_func)
        if self.reads_data:
            reraise_worker_error(item.batch)
            fields = check_fields(item.batch)
            check_mixup_fields(fields, mixup_func)
            tensors = apply_mixup({name: field.tensor for name, field in fields.items()}, local_mixup, device_type)
            layout = {name: field_layout(tensors[name], field) for name, field in fields.items()}
            if self.layout is not None and layout != self.layout:
                raise ValueError("stage-0-only loading needs fixed batch shapes; set "
                                 "train.stage0_only_loading=False for this data pipeline")
        if self.layout is None:
            self.layout = broadcast_from_rank0(layout if self.reads_data else None)
        if not self.reads_data:
            fields = {name: DistTensorData(None, sbp_list=spec["sbp_list"], placement_idx=spec["placement_idx"])
                      for name, spec in self.layout.items()}
            tensors = {name: placeholder(spec) for name, spec in self.layout.items()}
        return fields_to_global(tensors, fields, global_mixup, device_type)


def field_layout(tensor, field):
    """What a rank outside stage 0 needs to build a placeholder for this field (JSON-able)."""
    return {"shape": list(tensor.shape), "dtype": str(tensor.dtype), "device": tensor.device.type,
            "sbp_list": list(field.sbp_list), "placement_idx": field.placement_idx}


def placeholder(spec):
    """An uninitialised local tensor of a field's layout, on the device stage 0's tensor was on.

    LiBai's loaders yield CPU tensors, which ``to_global`` copies onto a CUDA placement itself;
    a dataset that yields CUDA tensors gets CUDA placeholders, so every rank hands ``to_global``
    the same kind of tensor.
    """
    return flow.empty(spec["shape"], dtype=_dtype(spec["dtype"]), device=spec["device"])


def _dtype(name):
    return getattr(flow, name.rsplit(".", 1)[-1])


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
