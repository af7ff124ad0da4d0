"""Any map-style dataset whose random augmentation is keyed by (seed, epoch, sample index).

``KeyedAugmentation(dataset, seed)[batch]``, for an ``EpochBatch`` (what
``GlobalOrderBatchSampler`` yields), is ``[dataset[i] for i in batch]`` with each sample read
right after ``seed_streams(seed, batch.epoch, i)``: the dataset's own transforms (flowvision's or
the user's, drawing from python ``random``, numpy's global stream or OneFlow's CPU generator)
draw the same numbers for that sample on any rank, in any worker, at any position of any
batch, and a new epoch draws new ones.  Generators the dataset holds itself
(``owned_generators``: sites found by ``random.owned_generators``) are seeded again for each
sample too, from (seed, epoch, index, attribute path).  The caller's streams are put back
after the batch.

With a ``collate_fn`` the batch is collated here as well, inside streams keyed by (seed, epoch,
optimizer step, first global position of the batch): whatever it draws is the same in any
worker and after a resume (though not on another data-parallel split: the loader refuses a
``collate_fn`` seen drawing, see ``engine.global_loader``).

Whole batches, not single samples, because OneFlow's generator state costs milliseconds to
save and restore (it waits for every queued kernel).  And only where the dataset draws from
OneFlow at all: the first batch is read with all three streams keyed, and if it made no OneFlow
draw (``random.oneflow_draws`` counts them; flowvision's crops and flips draw from numpy) the next
ones key python and numpy only, leaving OneFlow's generator and its queue alone.  A later batch
that draws from OneFlow after all is read again with the three keyed, and so are the rest (its
discarded read advanced this rank's own OneFlow CPU stream, which nothing under
``train.randomness="layout_invariant"`` reads).  So the loader takes the sampler as ``sampler`` with ``batch_size=None``
(each of its items is a batch); with ``num_workers > 0`` the epoch travels with the batch.
"""
from oneflow.utils.data import Dataset

from ..random import oneflow_draws
from ..random.oneflow_draws import watch_oneflow_draws
from ..random.sample_keys import owned_generator_seed, preserved_streams, seed_batch_streams, seed_streams


class KeyedAugmentation(Dataset):
    def __init__(self, dataset, seed, collate_fn=None, owned_generators=()):
        self.dataset = dataset
        self.seed = int(seed)
        self.collate_fn = collate_fn
        self.owned_generators = tuple(owned_generators)
        self.draws_from_oneflow = None  # unknown until the first batch is read
        watch_oneflow_draws()  # samples that draw nothing from OneFlow need no wait (sample_keys)

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, batch):
        epoch = getattr(batch, "epoch", None)
        if epoch is None:
            raise TypeError(f"KeyedAugmentation reads whole batches that know their epoch (an EpochBatch, as "
                            f"GlobalOrderBatchSampler yields them), not {batch!r}")
        if self.draws_from_oneflow is False and oneflow_draws.watching():
            before = oneflow_draws.draw_count()
            with preserved_streams(oneflow=False):
                result = self._keyed_batch(batch, epoch, oneflow=False)
            if oneflow_draws.draw_count() == before:
                return result
            self.draws_from_oneflow = True  # it drew after all: read again, OneFlow's generator keyed too
        before = oneflow_draws.draw_count()
        with preserved_streams(oneflow=True):
            result = self._keyed_batch(batch, epoch, oneflow=True)
        if self.draws_from_oneflow is None and oneflow_draws.watching():
            self.draws_from_oneflow = oneflow_draws.draw_count() != before
        return result

    def _keyed_batch(self, batch, epoch, oneflow):
        samples = [self._read(epoch, index, oneflow) for index in batch]
        if self.collate_fn is None:
            return samples
        seed_batch_streams(self.seed, epoch, getattr(batch, "step", 0), getattr(batch, "first_position", 0),
                           oneflow=oneflow)
        return self.collate_fn(samples)

    def _read(self, epoch, index, oneflow=True):
        seed_streams(self.seed, epoch, index, oneflow=oneflow)
        for site in self.owned_generators:
            site.reseed(self.dataset, owned_generator_seed(self.seed, epoch, index, site.path))
        return self.dataset[index]

    def __getattr__(self, name):
        # Code that reads attributes of the loader's dataset (e.g. ``classes``) still finds them.
        # Not "dataset" itself: a half-built copy (unpickled in a spawned worker) must not recurse.
        if name == "dataset":
            raise AttributeError(name)
        return getattr(self.dataset, name)
