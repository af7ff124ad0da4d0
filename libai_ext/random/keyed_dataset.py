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

Seeds and streams (``seed_streams``, ``keyed_streams``, ``owned_generator_seed``, a batch's ``collate_fn``
seeds): python ``random``, numpy's global stream and OneFlow's CPU generator, all three of which flowvision
0.1.0's transforms draw from.  ``draws_in_call_order``: on local rank ``r > 0`` OneFlow's factory ops run on
``cpu:r`` and ``flow.empty`` on ``cpu:0``, two streams sharing one generator (docs/upstream-bugs.md §30), so each
keyed draw first waits for the rank's queued work and draws read the generator in the order Python calls them, as
on 1 rank.  OneFlow 0.9.0's saved CPU generator state omits the position within its 624-word block, so the caller's
OneFlow stream resumes from a block boundary (``rng_state``); python's and numpy's resume exactly.
"""
import contextlib
import logging
import random

import numpy as np
import oneflow as flow
from oneflow.utils.data import Dataset, get_worker_info

from . import oneflow_draws
from .devices import own_cuda_device, own_cuda_generator
from .draws import key
from .oneflow_draws import finish_queued_draws

logger = logging.getLogger(__name__)
_DREW_FROM_ONEFLOW = object()  # a read that drew from OneFlow's generator unkeyed (discarded)


def sample_seeds(seed, epoch, index):
    """``(python, numpy, oneflow)`` seeds of one sample, those ``seed_streams`` sets: unrelated for neighbouring
    keys."""
    value = key(int(seed), int(epoch), int(index), bits=128)
    return value, value & 0xFFFFFFFF, (value >> 64) >> 1


def seed_streams(seed, epoch, index, oneflow=True):
    """Seed python, numpy's global stream and (``oneflow``) OneFlow's CPU generator for one sample."""
    _seed_three(key(int(seed), int(epoch), int(index), bits=128), oneflow=oneflow)


def owned_generator_seed(seed, epoch, index, path):
    """A 63-bit seed for the generator at attribute ``path`` of a dataset, for one sample."""
    return key("owned", int(seed), int(epoch), int(index), str(path)) >> 1


def _seed_three(value, oneflow=True):
    """Seed the three streams from a 128-bit key ``value``: python with all of it, numpy's legacy stream with its
    low 32 bits, OneFlow with a non-negative int64 from its high half."""
    random.seed(value)
    np.random.seed(value & 0xFFFFFFFF)
    if oneflow:
        finish_queued_draws(only_after_draws=True)  # the previous sample's draws are its own
        flow.default_generator.manual_seed((value >> 64) >> 1)


_PROBE_SEED = 0x6B65796564  # any fixed seed: the state right after seeding it is what "no draw" looks like
_probe_state = None


def seed_oneflow_probe():
    """Seed OneFlow's CPU generator with the probe seed (``oneflow_untouched_since_probe`` then tells whether
    anything drew from it)."""
    global _probe_state
    if _probe_state is None:
        flow.default_generator.manual_seed(_PROBE_SEED)
        _probe_state = flow.default_generator.get_state().numpy().copy()
    flow.default_generator.manual_seed(_PROBE_SEED)


def oneflow_untouched_since_probe():
    """Whether OneFlow's CPU generator is as ``seed_oneflow_probe`` left it: right after seeding, the
    Mersenne Twister's block is unused, so any draw regenerates it and changes the saved state."""
    finish_queued_work()  # a queued draw reads the generator when it runs
    return np.array_equal(flow.default_generator.get_state().numpy(), _probe_state)


@contextlib.contextmanager
def oneflow_draws_heard(keep_caller_stream=True):
    """Within: a list of the names of the calls that reach OneFlow's own random ops through libai_ext's wrappers
    (``oneflow_draws.listeners``), told at the call: nothing waits for the rank's queued work while nothing draws.
    ``keep_caller_stream``: OneFlow's CPU generator is saved right before the first such draw runs (one wait,
    then) and put back on leaving, so a discarded read advances nothing the caller draws."""
    heard, saved = [], []

    def listener(name):
        if keep_caller_stream and not heard:
            finish_queued_draws()
            saved.append(flow.default_generator.get_state())
        heard.append(name)

    oneflow_draws.listeners.append(listener)
    try:
        yield heard
    finally:
        oneflow_draws.listeners.remove(listener)
        if saved:
            finish_queued_draws()
            flow.default_generator.set_state(saved[0])


def finish_queued_work():
    """Wait for every op queued on this rank, on all of its streams."""
    flow._oneflow_internal.eager.Sync()


@contextlib.contextmanager
def draws_in_call_order():
    """Within: every call that reaches OneFlow's own random ops through libai_ext's wrappers first waits for
    the rank's queued work (see the module's doc), so the draws read OneFlow's CPU generator in call order
    whichever streams run them."""
    def listener(name):
        finish_queued_work()

    oneflow_draws.listeners.append(listener)
    try:
        yield
    finally:
        oneflow_draws.listeners.remove(listener)


class KeyedDrawOnGPU(RuntimeError):
    """A dataset drew from a CUDA generator inside keyed augmentation, which keys host streams only."""


@contextlib.contextmanager
def preserved_streams(oneflow=True):
    """The caller's python, numpy and (``oneflow``) OneFlow CPU streams, put back on leaving.

    ``oneflow=False`` for code known to draw nothing from OneFlow: OneFlow's state is then neither
    read nor written, and nothing waits for its queued kernels.

    Draws on the GPU are refused, not keyed: re-seeding this rank's CUDA generator per sample
    would make OneFlow wait for the device at every sample, and putting the caller's CUDA stream
    back relies on OneFlow 0.9.0's CUDA generator state, which may not hold every offset its
    kernels advance.  So where this process can draw on CUDA (a CUDA host, outside loader workers,
    which cannot use CUDA), this rank's CUDA generator state is read on entry and compared on
    leaving (two device synchronisations per batch): a dataset that drew from it raises
    ``KeyedDrawOnGPU``.  OneFlow's state costs milliseconds to read and write, so callers wrap a
    whole batch, not each sample.
    """
    saved = random.getstate(), np.random.get_state()
    if oneflow:
        finish_queued_draws()
        saved_oneflow = flow.default_generator.get_state()
    cuda = _own_cuda_generator_in_reach() if oneflow else None
    cuda_before = None if cuda is None else cuda.get_state().numpy()
    try:
        yield
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        if oneflow:
            finish_queued_draws()
            flow.default_generator.set_state(saved_oneflow)
    if cuda_before is not None and not np.array_equal(cuda.get_state().numpy(), cuda_before):
        raise KeyedDrawOnGPU(
            f"the dataset drew random numbers on cuda:{own_cuda_device()} during keyed augmentation, which keys "
            "python, numpy and OneFlow's CPU generator only (its GPU draws would differ between ranks and runs): "
            "draw the dataset's augmentation on the CPU")


def _own_cuda_generator_in_reach():
    """This rank's CUDA generator where a dataset could draw from it; None on CPU hosts and in loader
    workers (forked processes, where OneFlow does not use CUDA)."""
    if get_worker_info() is not None:
        return None
    return own_cuda_generator()


@contextlib.contextmanager
def keyed_streams(seed, epoch, index):
    """One sample's streams while inside, the caller's afterwards."""
    with preserved_streams():
        seed_streams(seed, epoch, index)
        yield


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
            samples = []
            for index in batch:
                samples.append(self._read(epoch, index, oneflow=True))
            self._verify(batch, epoch, samples, oneflow=True)
            return self._collate(samples, batch, epoch, oneflow=True)

    def _read_unless_it_draws_from_oneflow(self, batch, epoch):
        """The batch with python and numpy keyed per sample, or ``_DREW_FROM_ONEFLOW`` where reading it drew
        from OneFlow's generator (the caller's OneFlow stream then as it was)."""
        # OneFlow's generator state is checked too in loader workers, and in the main process at each epoch's first
        # batch (decided there: while the wrappers watch, the epoch's other batches rely on their reports).
        check_state = get_worker_info() is not None or epoch != self._state_checked_epoch
        if check_state and get_worker_info() is None and oneflow_draws.watching():
            self._state_checked_epoch = epoch
        with preserved_streams(oneflow=check_state), oneflow_draws_heard(not check_state) as heard:
            if check_state:
                seed_oneflow_probe()
            samples = []
            for index in batch:
                samples.append(self._read(epoch, index, oneflow=False))
            if heard:
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
            if heard:
                return _DREW_FROM_ONEFLOW
        self._reads_unchecked = 0 if check_state else self._reads_unchecked + 1
        return result

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

    def _verify(self, batch, epoch, samples, oneflow):
        """The check by effect (``random.augmentation_check``) on the batches it is due on: the first
        ``first_batches`` this process reads, then every ``period``-th."""
        check = self.check
        if check is None or not samples:
            return
        read, check.reads = check.reads, check.reads + 1
        if read < check.first_batches or (check.period > 0 and (read - check.first_batches + 1) % check.period == 0):
            check.verify(self, batch, epoch, samples, oneflow)

    def _collate(self, samples, batch, epoch, oneflow):
        if self.collate_fn is None:
            return samples
        _seed_three(key("collate", self.seed, int(epoch), int(getattr(batch, "step", 0)),
                        int(getattr(batch, "first_position", 0)), bits=128), oneflow=oneflow)
        return self.collate_fn(samples)

    def _read(self, epoch, index, oneflow):
        _seed_three(key(self.seed, int(epoch), int(index), bits=128), oneflow=oneflow)  # (``seed_streams``'s key)
        for site in self.owned_generators:
            site.reseed(self.dataset, owned_generator_seed(self.seed, epoch, index, site.path))
        return self.dataset[index]

    def __getattr__(self, name):
        # Code that reads attributes of the loader's dataset (e.g. ``classes``) still finds them.
        # Not "dataset" itself: a half-built copy (unpickled in a spawned worker) must not recurse.
        if name == "dataset":
            raise AttributeError(name)
        return getattr(self.dataset, name)
