"""Stage-0-only data loading: ranks outside pipeline stage 0 read and augment nothing (docs/usage.md).

Every field's data comes from stage 0, so what other stages would read is thrown away.  ``Stage0OnlyLoader``
broadcasts the layout of stage 0's first batch once (name, shape, dtype, device, sbp, placement_idx); the other
ranks then yield LiBai ``Instance``s of zero tensors of that layout, which ``to_global`` drops.  Stage 0 is
untouched, so its batches are bit-identical to the default path.  Batch shapes must not change between steps
(LiBai's training samplers always yield full micro-batches); evaluation loaders keep the default path.
"""
import json

import numpy as np
import oneflow as flow
from libai.config import try_get_key
from libai.data.structures import DistTensorData, Instance
from libai.utils import distributed as dist

from .batch import check_fields

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
            batch = next(batches, None) if batches is not None else None
            if batches is not None and batch is None:
                return
            layout = self._layout(batch)
            if self.layout is None:
                self.layout = broadcast_from_rank0(layout)
                if self.layout is None:
                    raise RuntimeError("stage-0-only loading: rank 0 could not read its first batch (its error is "
                                       "in rank 0's log)")
            yield batch if self.reads_data else Instance(**{
                name: DistTensorData(placeholder(spec), sbp_list=spec["sbp_list"], placement_idx=spec["placement_idx"])
                for name, spec in self.layout.items()})

    def _layout(self, batch):
        """The layout of stage 0's ``batch`` (None elsewhere, or for a loader worker's error, which
        ``get_batch`` raises), checked against the first batch's."""
        if not self.reads_data or isinstance(batch, flow.utils.data._utils.worker.ExceptionWrapper):
            return None
        layout = {}
        for name, field in check_fields(batch).items():
            layout[name] = field_layout(field.tensor, field)
        if self.layout is not None and layout != self.layout:
            raise ValueError("stage-0-only loading needs fixed batch shapes; set "
                             "train.stage0_only_loading=False for this data pipeline")
        return layout


def field_layout(tensor, field):
    """What a rank outside stage 0 needs to build a placeholder for this field (JSON-able)."""
    return {"shape": list(tensor.shape), "dtype": str(tensor.dtype), "device": tensor.device.type,
            "sbp_list": list(field.sbp_list), "placement_idx": field.placement_idx}


def placeholder(spec):
    """A local tensor of zeros of a field's layout, on the device stage 0's tensor was on (zeros: a local
    mixup reads class ids from it).

    LiBai's loaders yield CPU tensors, which ``to_global`` copies onto a CUDA placement itself;
    a dataset that yields CUDA tensors gets CUDA placeholders, so every rank hands ``to_global``
    the same kind of tensor.
    """
    return flow.zeros(spec["shape"], dtype=_dtype(spec["dtype"]), device=spec["device"])


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
