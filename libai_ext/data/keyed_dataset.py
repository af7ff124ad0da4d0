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
save and restore (it waits for every queued kernel).  Every batch keys all three streams, whatever
the dataset is known to draw: a draw from OneFlow cannot be told from its name (a dataset may reach
its generator through any op, a ``Tensor`` method or a name bound at import), and OneFlow 0.9.0's
generator state does not show a draw within its 624-word block, so neither names nor the state
can prove a batch drew nothing.  ``benchmarks/loader_keying.py`` measures what this costs.  So the
loader takes the sampler as ``sampler`` with ``batch_size=None`` (each of its items is a batch);
with ``num_workers > 0`` the epoch travels with the batch.
"""
from oneflow.utils.data import Dataset

from ..random.sample_keys import owned_generator_seed, preserved_streams, seed_batch_streams, seed_streams


class KeyedAugmentation(Dataset):
    def __init__(self, dataset, seed, collate_fn=None, owned_generators=()):
        self.dataset = dataset
        self.seed = int(seed)
        self.collate_fn = collate_fn
        self.owned_generators = tuple(owned_generators)

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, batch):
        epoch = getattr(batch, "epoch", None)
        if epoch is None:
            raise TypeError(f"KeyedAugmentation reads whole batches that know their epoch (an EpochBatch, as "
                            f"GlobalOrderBatchSampler yields them), not {batch!r}")
        with preserved_streams(oneflow=True):
            return self._keyed_batch(batch, epoch)

    def _keyed_batch(self, batch, epoch):
        samples = [self._read(epoch, index) for index in batch]
        if self.collate_fn is None:
            return samples
        seed_batch_streams(self.seed, epoch, getattr(batch, "step", 0), getattr(batch, "first_position", 0))
        return self.collate_fn(samples)

    def _read(self, epoch, index):
        seed_streams(self.seed, epoch, index)
        for site in self.owned_generators:
            site.reseed(self.dataset, owned_generator_seed(self.seed, epoch, index, site.path))
        return self.dataset[index]

    def __getattr__(self, name):
        # Code that reads attributes of the loader's dataset (e.g. ``classes``) still finds them.
        # Not "dataset" itself: a half-built copy (unpickled in a spawned worker) must not recurse.
        if name == "dataset":
            raise AttributeError(name)
        return getattr(self.dataset, name)
