"""Gradient accumulation in eager mode: a step's micro-batches made global as one batch.

LiBai's eager trainer runs one micro-batch per iteration (it multiplies ``train_iter`` by
``train.num_accumulation_steps``).  Under ``train.randomness="layout_invariant"`` the global batch of
optimizer step ``t`` is the same samples on any layout, and so is each of its ``n`` micro-batches:
micro-batch ``m`` is the positions ``[m * S, (m + 1) * S)`` of the step, ``S = dp * s``, of which the
global-order sampler gives data-parallel rank ``r`` the ``s`` from ``m * S + r * s``.  A global
mixup must pair and weigh the step's samples as one batch, as 1 rank with the whole batch does.

``StepBatchLoader`` reads a step's ``n`` micro-batches at its first micro-step.  ``get_batch`` then
makes them one global stage-0 batch (one mixup draw keyed by the step, through the same path as any
batch) and hands out micro-batch ``m`` as the rows ``[m * s, (m + 1) * s)`` of every data-parallel
rank's block: the positions ``[m * S, (m + 1) * S)`` in order, the numbering the stochastic layers use
for their masks (``libai_ext.random.global_index.StepRows``).  The joined step's row ``(r, m, i)``
holds position ``m * S + r * s + i``; its flip (the global mixup's partner) holds ``G - 1`` minus
that position, as on 1 rank.  A graph needs none of this: it takes the whole step at once and OneFlow
splits each rank's rows the same way.
"""
import oneflow as flow
from libai.data.structures import DistTensorData, Instance

from .batch import consistent_batch
from .stage0_loading import Stage0Batch


def join_micro_batches(items):
    """One LiBai ``Instance`` whose fields are the micro-batches' local tensors, concatenated."""
    fields = items[0].get_fields()
    return Instance(**{name: DistTensorData(flow.cat([item.get(name).tensor for item in items], dim=0),
                                            sbp_list=field.sbp_list, placement_idx=field.placement_idx)
                       for name, field in fields.items()})


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


class StepBatch:
    """The ``n`` micro-batches of one step, made global once."""

    def __init__(self, items, micro_batches):
        self.items, self.micro_batches = items, micro_batches
        self._fields = None

    def fields(self, mixup_func, device_type):
        if self._fields is None:
            if isinstance(self.items[0], Stage0Batch):
                batches = [item.batch for item in self.items]
                joined = join_micro_batches(batches) if batches[0] is not None else None
                self._fields = Stage0Batch(joined, self.items[0].source).to_global(mixup_func, device_type)
            else:
                self._fields = consistent_batch(join_micro_batches(self.items), mixup_func, device_type)
            self.items = None
        return self._fields


class StepMicroBatch:
    """What ``StepBatchLoader`` yields: micro-batch ``micro`` of a ``StepBatch``."""

    def __init__(self, step_batch, micro):
        self.step_batch, self.micro = step_batch, micro

    def to_global(self, mixup_func=None, device_type=None):
        fields = self.step_batch.fields(mixup_func, device_type)
        return {name: micro_rows(tensor, self.micro, self.step_batch.micro_batches) for name, tensor in fields.items()}


class StepBatchLoader:
    """Wraps a train loader: yields each step's micro-batches after reading all of them."""

    def __init__(self, loader, micro_batches):
        self.loader, self.micro_batches = loader, int(micro_batches)
        self.dataset = loader.dataset  # LiBai sizes epochs from len(dataset)
        self.mixup_func = getattr(loader, "mixup_func", None)

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        items = iter(self.loader)
        while True:
            step = []
            for _ in range(self.micro_batches):
                try:
                    step.append(next(items))
                except StopIteration:
                    return
            step_batch = StepBatch(step, self.micro_batches)
            for micro in range(self.micro_batches):
                yield StepMicroBatch(step_batch, micro)
