"""The train loader over a ``GlobalOrderBatchSampler``: it knows which batch the trainer has reached.

It starts reading at the first batch asked for, not when iterated: LiBai's trainers call ``iter(loader)`` in their
constructor, before ``resume_or_load`` restores the data position, and OneFlow's iterator would already have sent
the workers the old position's indices.  ``delivered`` is the position of the next batch handed to the trainer (the
sampler runs ahead by the workers' prefetch).  Each batch carries its ``BatchPosition`` (``batch_position``,
docs/data_order.md); ``restart_at(position)`` makes the next batch the one at ``position`` (running workers restart).
"""
from libai.data.structures import Instance
from oneflow.utils.data import DataLoader

_POSITION_ATTRIBUTE = "_batch_position"  # Instance keeps attributes starting with "_" out of its fields


def already_collated(batch):
    # The dataset (KeyedAugmentation) collates each batch itself, inside the batch's keyed streams.
    return batch


class GlobalOrderLoader(DataLoader):
    """``DataLoader(dataset, sampler=global_order_sampler, batch_size=None, ...)``: each sampler item is a
    batch, and ``dataset[batch]`` is the whole batch, already collated."""

    def __init__(self, dataset, sampler, collate_fn=already_collated, **options):
        super().__init__(dataset, sampler=sampler, batch_size=None, collate_fn=collate_fn, **options)
        self.delivered = sampler.position
        self._generation = 0

    def __iter__(self):
        return _Delivery(self)

    def restart_at(self, position):
        self.sampler.position = position
        self.delivered = position
        self._generation += 1


class _Delivery:
    """The trainer's iterator: starts the loader's own iterator on the first ``next``."""

    def __init__(self, loader):
        self.loader = loader
        self._batches = None
        self._generation = None

    def __iter__(self):
        return self

    def __next__(self):
        loader = self.loader
        if self._generation != loader._generation:
            self._stop_workers()
            self._batches = DataLoader.__iter__(loader)
            self._generation = loader._generation
        data = next(self._batches)
        where = loader.sampler.batch_position(loader.delivered)
        loader.delivered = loader.sampler.advance(loader.delivered)
        if isinstance(data, Instance):
            setattr(data, _POSITION_ATTRIBUTE, where)
        return data

    def _stop_workers(self):
        if hasattr(self._batches, "_shutdown_workers"):
            self._batches._shutdown_workers()


def batch_position(data):
    """The ``BatchPosition`` of a batch the train loader handed out (a LiBai ``Instance``, or an object
    holding one as ``.batch``, as stage-0-only loading's), or None (another loader, a placeholder)."""
    if not isinstance(data, Instance):
        data = getattr(data, "batch", None)
    return vars(data).get(_POSITION_ATTRIBUTE) if isinstance(data, Instance) else None
