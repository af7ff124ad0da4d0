"""Any map-style dataset whose random augmentation is keyed by (seed, epoch, sample index) (docs/data_order.md).

``KeyedAugmentation(dataset, seed)[batch]``, for an ``EpochBatch`` (what ``GlobalOrderBatchSampler`` yields), is
``[dataset[i] for i in batch]`` with each sample read right after ``seed_streams(seed, batch.epoch, i)``, generators
the dataset owns re-seeded per sample (``owned_generators``), and the batch collated inside streams keyed by its
step and first global position.  The caller's streams are put back after the batch.

Whole batches, not samples, because OneFlow's generator state costs milliseconds to save and restore (it waits
for every queued kernel).  So OneFlow's generator is keyed only where the dataset is seen drawing from it: a
batch is first read with python and numpy keyed, while libai_ext's wrappers of OneFlow's random ops
(``random.oneflow_draws``) report any call; where one drew, the batch is read again with OneFlow keyed too, and
so is every later batch.  A draw the wrappers cannot see (a reference to OneFlow's op taken before they existed)
shows in the generator's state after a probe seed (right after seeding, OneFlow 0.9.0's Mersenne Twister block
is unused, so any draw regenerates it); that wait is paid on every batch in loader workers, and on each epoch's
first batch in the main process.  With a ``check`` (``random.augmentation_check``) such a draw is refused by
name, and on the batches the check is due on one sample is read again after every generator was disturbed.
"""
import logging

from oneflow.utils.data import Dataset, get_worker_info

from . import oneflow_draws
from .sample_keys import (
    draws_in_call_order, oneflow_draws_heard, oneflow_untouched_since_probe, owned_generator_seed, preserved_streams,
    seed_batch_streams, seed_oneflow_probe, seed_streams,
)

logger = logging.getLogger(__name__)
_DREW_FROM_ONEFLOW = object()  # a read that drew from OneFlow's generator unkeyed (discarded)


class KeyedAugmentation(Dataset):
    def __init__(self, dataset, seed, collate_fn=None, owned_generators=(), check=None):
        self.dataset = dataset
        self.seed = int(seed)
        self.collate_fn = collate_fn
        self.owned_generators = tuple(owned_generators)
        self.check = check  # an ``AugmentationCheck`` (the check by effect), or None
        self.draws_from_oneflow = False  # until a batch is seen drawing from OneFlow's generator
        self._state_checked_epoch = None  # the main process's last epoch whose first batch it checked
        self._reads_unchecked = 0  # batches read since the last check with the wrappers' reports alone

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, batch):
        epoch = getattr(batch, "epoch", None)
        if epoch is None:
            raise TypeError(f"KeyedAugmentation reads whole batches that know their epoch (an EpochBatch, as "
                            f"GlobalOrderBatchSampler yields them), not {batch!r}")
        if not self.draws_from_oneflow:
            result = self._read_unless_it_draws_from_oneflow(batch, epoch)
            if result is not _DREW_FROM_ONEFLOW:
                return result
            self.draws_from_oneflow = True
        with preserved_streams(oneflow=True), draws_in_call_order():
            samples = self._keyed_samples(batch, epoch, oneflow=True)
            self._verify(batch, epoch, samples, oneflow=True)
            return self._collate(samples, batch, epoch, oneflow=True)

    def _read_unless_it_draws_from_oneflow(self, batch, epoch):
        """The batch with python and numpy keyed per sample, or ``_DREW_FROM_ONEFLOW`` where reading it drew
        from OneFlow's generator (the caller's OneFlow stream then as it was)."""
        check_state = self._checks_generator_state(epoch)
        with preserved_streams(oneflow=check_state), oneflow_draws_heard(not check_state) as heard:
            if check_state:
                seed_oneflow_probe()
            samples = self._keyed_samples(batch, epoch, oneflow=False)
            if heard.drew:
                return _DREW_FROM_ONEFLOW
            if check_state and not oneflow_untouched_since_probe():
                if self.check is not None and self.check.action == "refuse" and oneflow_draws.watching():
                    self.check.unreported_oneflow_draw(self, batch, epoch)
                self._warn_unreported_draw()
                return _DREW_FROM_ONEFLOW
            # Before collating: LiBai's collate of a one-sample batch (DistTensorData.stack) adds the batch
            # dimension to that sample in place, which a read again would not match
            self._verify(batch, epoch, samples, oneflow=False)
            result = self._collate(samples, batch, epoch, oneflow=False)
            if heard.drew:
                return _DREW_FROM_ONEFLOW
        self._reads_unchecked = 0 if check_state else self._reads_unchecked + 1
        return result

    def _checks_generator_state(self, epoch):
        """Whether this read also checks OneFlow's generator state (see the module's doc)."""
        if get_worker_info() is not None or not oneflow_draws.watching():
            return True
        if epoch == self._state_checked_epoch:
            return False
        self._state_checked_epoch = epoch
        return True

    def _warn_unreported_draw(self):
        if self._reads_unchecked:
            logger.warning(
                f"keyed augmentation: the dataset drew from OneFlow's CPU generator through a function libai_ext's "
                f"wrappers do not see (a reference to OneFlow's own op taken before they were installed: a default "
                f"argument, a closure). Every batch is keyed from this one on, but the {self._reads_unchecked} "
                f"batch(es) this process read since it last checked the generator (at an epoch's first batch) were "
                f"checked at the calls only and may have drawn unkeyed. Read the data in loader workers "
                f"(dataloader.train.num_workers > 0: every batch is checked there at no cost), or call OneFlow's "
                f"ops by their names.")

    def _keyed_samples(self, batch, epoch, oneflow):
        return [self._read(epoch, index, oneflow) for index in batch]

    def _verify(self, batch, epoch, samples, oneflow):
        """The check by effect (``random.augmentation_check``) on the batches it is due on."""
        if self.check is not None and samples and self.check.due():
            self.check.verify(self, batch, epoch, samples, oneflow)

    def _collate(self, samples, batch, epoch, oneflow):
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
