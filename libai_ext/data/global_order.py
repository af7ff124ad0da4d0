"""A batch sampler whose global batch does not depend on the data-parallel size.

LiBai's ``CyclicSampler`` gives each data-parallel rank a contiguous bucket of the dataset,
so the global batch of step ``t`` on dp=2 holds other samples than on 1 rank.  Here every
rank walks the same permutation of the *whole* dataset (one per (seed, epoch)): global batch
``t`` is the next ``micro_batch_size * data_parallel_size`` entries, and rank ``r`` takes the
``r``-th ``micro_batch_size`` of them.  On 1 rank with micro batch 32 and on dp2 with 16 per
rank the global batches are the same samples in the same order.

Conventions follow ``CyclicSampler`` so that LiBai's trainers need nothing else: it cycles
forever, ``consumed_samples`` counts *global* samples (LiBai's resume position), each epoch
drops the tail that does not fill a global batch, and ``len()`` is the dataset size.

Each batch is an ``EpochBatch``: a list of dataset indices (usable as any ``batch_sampler``'s)
that also says its epoch, which ``KeyedAugmentation`` needs to key each sample's augmentation.
"""
from oneflow.utils.data import Sampler

from ..random.sample_keys import epoch_permutation


class EpochBatch(list):
    """A batch of dataset indices, and the epoch they were drawn in."""

    def __init__(self, indices, epoch):
        super().__init__(indices)
        self.epoch = int(epoch)


class GlobalOrderBatchSampler(Sampler):
    """``CyclicSampler``'s arguments; yields this rank's ``EpochBatch`` of each global batch."""

    def __init__(self, dataset, micro_batch_size, shuffle=True, consumed_samples=0, data_parallel_rank=0,
                 data_parallel_size=1, seed=0):
        _check_layout(micro_batch_size, data_parallel_rank, data_parallel_size, consumed_samples)
        self.dataset = dataset
        self.data_size = len(dataset)
        self.micro_batch_size = int(micro_batch_size)
        self.data_parallel_rank = int(data_parallel_rank)
        self.data_parallel_size = int(data_parallel_size)
        self.global_batch_size = self.micro_batch_size * self.data_parallel_size
        if self.data_size < self.global_batch_size:
            raise ValueError(
                f"the training dataset has {self.data_size} samples, fewer than one global batch of "
                f"{self.global_batch_size} (train.train_micro_batch_size x data parallel size)")
        self.samples_per_epoch = self.data_size // self.global_batch_size * self.global_batch_size
        self.shuffle = shuffle
        self.consumed_samples = int(consumed_samples)
        self.seed = int(seed)

    def epoch_order(self, epoch):
        """The global order of ``epoch``: the samples every rank's slices come from."""
        if self.shuffle:
            order = epoch_permutation(self.seed, epoch, self.data_size)
        else:
            order = range(self.data_size)
        return [int(i) for i in order[:self.samples_per_epoch]]

    def __iter__(self):
        epoch, offset = divmod(self.consumed_samples, self.samples_per_epoch)
        while True:
            order = self.epoch_order(epoch)
            shares = [self._share(order, start) for start in self._batch_starts(offset)]
            if getattr(self.dataset, "supports_prefetch", False):
                self.dataset.prefetch([i for share in shares for i in share])
            for share in shares:
                self.consumed_samples += self.global_batch_size
                yield EpochBatch(share, epoch)
            # What of the epoch cannot fill a global batch is skipped: the next epoch starts afresh.
            self.consumed_samples = (epoch + 1) * self.samples_per_epoch
            epoch, offset = epoch + 1, 0

    def _batch_starts(self, offset):
        # A resume position inside a global batch starts there, as CyclicSampler's does.
        return range(offset, self.samples_per_epoch - self.global_batch_size + 1, self.global_batch_size)

    def _share(self, order, start):
        """This rank's micro batch of the global batch that starts at ``order[start]``."""
        first = start + self.data_parallel_rank * self.micro_batch_size
        return order[first:first + self.micro_batch_size]

    def __len__(self):
        return self.data_size

    def set_consumed_samples(self, consumed_samples):
        self.consumed_samples = int(consumed_samples)


def _check_layout(micro_batch_size, data_parallel_rank, data_parallel_size, consumed_samples):
    if int(micro_batch_size) < 1:
        raise ValueError(f"train.train_micro_batch_size={micro_batch_size} must be at least 1")
    if int(data_parallel_size) < 1 or not 0 <= int(data_parallel_rank) < int(data_parallel_size):
        raise ValueError(f"data parallel rank {data_parallel_rank} is outside the data parallel size "
                         f"{data_parallel_size} (train.dist.data_parallel_size)")
    if int(consumed_samples) < 0:
        raise ValueError(f"dataloader.consumed_samples={consumed_samples} must not be negative")
