"""Gradient accumulation in eager mode: a step's micro-batches made global as one batch.

LiBai's eager trainer runs one micro-batch per iteration.  A global mixup must pair and weigh the step's samples
as one batch, as 1 rank with the whole batch does, so ``StepBatchLoader`` reads a step's ``n`` micro-batches at its
first micro-step and yields their join at each of the ``n`` micro-steps; ``consistent_batch`` makes the join global
once and hands out micro-batch ``m`` as rows ``[m * s, (m + 1) * s)`` of every data-parallel rank's block: the
step's positions ``[m * S, (m + 1) * S)``, ``S = dp * s``, in the order the global-order sampler and the stochastic
layers number them (docs/data_order.md).  A graph takes the whole step at once and needs none of this.
"""
import oneflow as flow
from libai.data.structures import DistTensorData, Instance

from .batch import reraise_worker_error


def join_micro_batches(items):
    """One LiBai ``Instance`` whose fields are the micro-batches' local tensors, concatenated."""
    for item in items:
        reraise_worker_error(item)
    fields = items[0].get_fields()
    return Instance(**{name: DistTensorData(flow.cat([item.get(name).tensor for item in items], dim=0),
                                            sbp_list=field.sbp_list, placement_idx=field.placement_idx)
                       for name, field in fields.items()})


class StepBatchLoader:
    """Wraps a train loader: yields each step's joined micro-batches, once per micro-step, after reading all of
    them; the join carries ``_micro_batches``, ``_micro`` (this micro-step's) and ``_global`` (the global batch,
    once made)."""

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
            joined = join_micro_batches(step)
            joined._micro_batches, joined._global = self.micro_batches, None
            for micro in range(self.micro_batches):
                joined._micro = micro
                yield joined
