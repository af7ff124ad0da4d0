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
save and restore (it waits for every queued kernel).  And OneFlow's generator is keyed per sample
only where the dataset draws from it, which is read from the generator itself, not from the names
the dataset calls (it may reach OneFlow through any op, a ``Tensor`` method, a name bound at
import): a batch is first read with python and numpy keyed per sample and OneFlow's CPU generator
freshly seeded with a probe seed.  Right after seeding, OneFlow 0.9.0's Mersenne Twister block is
unused, so any draw regenerates it and the saved state changes (later draws within a block would
not show).  If the state is still the probe's, nothing drew from OneFlow and the batch stands; if
not, the batch is read again with OneFlow keyed per sample too, and so is every later batch (its
discarded read advanced nothing training reads).  ``benchmarks/loader_keying.py`` measures both.
So the loader takes the sampler as ``sampler`` with ``batch_size=None`` (each of its items is a
batch); with ``num_workers > 0`` the epoch travels with the batch.
"""
from oneflow.utils.data import Dataset

from ..random.sample_keys import (
    oneflow_untouched_since_probe, owned_generator_seed, preserved_streams, seed_batch_streams, seed_oneflow_probe,
    seed_streams,
)


class KeyedAugmentation(Dataset):
    def __init__(self, dataset, seed, collate_fn=None, owned_generators=()):
        self.dataset = dataset
        self.seed = int(seed)
        self.collate_fn = collate_fn
        self.owned_generators = tuple(owned_generators)
        self.draws_from_oneflow = False  # until a batch is seen drawing from OneFlow's generator

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, batch):
        epoch = getattr(batch, "epoch", None)
        if epoch is None:
            raise TypeError(f"KeyedAugmentation reads whole batches that know their epoch (an EpochBatch, as "
                            f"GlobalOrderBatchSampler yields them), not {batch!r}")
        with preserved_streams(oneflow=True):
            if not self.draws_from_oneflow:
                seed_oneflow_probe()
                result = self._keyed_batch(batch, epoch, oneflow=False)
                if oneflow_untouched_since_probe():
                    return result
                self.draws_from_oneflow = True
            return self._keyed_batch(batch, epoch, oneflow=True)

    def _keyed_batch(self, batch, epoch, oneflow):
        samples = [self._read(epoch, index, oneflow) for index in batch]
        if self.collate_fn is None:
            return samples
        seed_batch_streams(self.seed, epoch, getattr(batch, "step", 0), getattr(batch, "first_position", 0),
                           oneflow=oneflow)
        return self.collate_fn(samples)

    def _read(self, epoch, index, oneflow):
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
