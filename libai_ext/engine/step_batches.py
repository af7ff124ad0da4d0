"""Gradient accumulation in eager mode: a step's micro-batches made global as one batch.

LiBai's eager trainer runs one micro-batch per iteration (it multiplies ``train_iter`` by
``train.num_accumulation_steps``).  Under ``train.randomness="layout_invariant"`` the global batch of
optimizer step ``t`` is the same samples on any layout, and so is each of its ``n`` micro-batches:
micro-batch ``m`` is the positions ``[m * S, (m + 1) * S)`` of the step, ``S = dp * s``, of which the
global-order sampler gives data-parallel rank ``r`` the ``s`` from ``m * S + r * s``.  A global
mixup must pair and weigh the step's samples as one batch, as 1 rank with the whole batch does.

``StepBatchLoader`` reads a step's ``n`` micro-batches at its first micro-step and yields their join (one
LiBai ``Instance``) at each of the ``n`` micro-steps, marked with the micro-batch.  ``get_batch``
(``engine.batch.consistent_batch``) makes the join one global stage-0 batch once (one mixup draw keyed by
the step) and hands out micro-batch ``m`` as the rows ``[m * s, (m + 1) * s)`` of every data-parallel
rank's block: the positions ``[m * S, (m + 1) * S)`` in order, the numbering the stochastic layers use
for their masks (``libai_ext.random.global_index.StepRows``).  The joined step's row ``(r, m, i)``
holds position ``m * S + r * s + i``; its flip (the global mixup's partner) holds ``G - 1`` minus
that position, as on 1 rank.  A graph needs none of this: it takes the whole step at once and OneFlow
splits each rank's rows the same way.
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
