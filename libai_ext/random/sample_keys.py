"""Data randomness keyed by (seed, epoch, sample) instead of by who reads what, and when (docs/data_order.md).

* ``epoch_order(seed, epoch, size)``: the order of a whole dataset in one epoch, a keyed permutation computed per
  position (``index_shuffle``);
* ``seed_streams`` / ``keyed_streams``: python ``random``, numpy's global stream and OneFlow's CPU generator
  seeded for one sample (flowvision 0.1.0's transforms draw from all three), the caller's streams put back after;
* ``seed_batch_streams``: the same three for a batch's ``collate_fn``; ``owned_generator_seed``: a generator a
  dataset owns, per sample.

``draws_in_call_order``: on local rank ``r > 0`` OneFlow's factory ops run on ``cpu:r`` and ``flow.empty`` on
``cpu:0``, two streams sharing one generator (docs/upstream-bugs.md §30), so each keyed draw first waits for the
rank's queued work and draws read the generator in the order Python calls them, as on 1 rank.  OneFlow 0.9.0's
saved CPU generator state omits the position within its 624-word block, so the caller's OneFlow stream resumes
from a block boundary (``rng_state``); python's and numpy's resume exactly.
"""
import contextlib
import random

import numpy as np
import oneflow as flow
from oneflow.utils.data import get_worker_info

from .devices import own_cuda_device, own_cuda_generator

from . import oneflow_draws
from .oneflow_draws import finish_queued_draws
from .index_shuffle import IndexShuffle
from .keys import key


def epoch_order(seed, epoch, size):
    """The order of ``range(size)`` in ``epoch``: ``epoch_order(...)(positions)`` -> dataset indices.

    A pure function of (``seed``, ``epoch``), computed per position: starting an epoch costs
    nothing whatever the dataset's size.
    """
    return IndexShuffle(size, (int(seed), "order", int(epoch)))


def sample_seeds(seed, epoch, index):
    """``(python, numpy, oneflow)`` seeds of one sample: unrelated for neighbouring keys."""
    return _three_seeds(key(int(seed), int(epoch), int(index), bits=128))


def _three_seeds(value):
    numpy_seed = value & 0xFFFFFFFF  # the legacy RandomState takes 32 bits
    oneflow_seed = (value >> 64) >> 1  # OneFlow wants a non-negative int64
    return value, numpy_seed, oneflow_seed


def seed_streams(seed, epoch, index, oneflow=True):
    """Seed python, numpy's global stream and (``oneflow``) OneFlow's CPU generator for one sample."""
    _seed_three(*sample_seeds(seed, epoch, index), oneflow=oneflow)


def seed_batch_streams(seed, epoch, step, first_position, oneflow=True):
    """Seed the three streams for the ``collate_fn`` of one batch: this rank's batch that starts at
    ``first_position`` of the global batch of ``step``."""
    _seed_three(*_three_seeds(key("collate", int(seed), int(epoch), int(step), int(first_position), bits=128)),
                oneflow=oneflow)


def owned_generator_seed(seed, epoch, index, path):
    """A 63-bit seed for the generator at attribute ``path`` of a dataset, for one sample."""
    return key("owned", int(seed), int(epoch), int(index), str(path)) >> 1


def _seed_three(python_seed, numpy_seed, oneflow_seed, oneflow=True):
    random.seed(python_seed)
    np.random.seed(numpy_seed)
    if oneflow:
        finish_queued_draws(only_after_draws=True)  # the previous sample's draws are its own
        flow.default_generator.manual_seed(oneflow_seed)


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
    flow._oneflow_internal.eager.Sync()  # a queued draw reads the generator when it runs
    return np.array_equal(flow.default_generator.get_state().numpy(), _probe_state)


@contextlib.contextmanager
def oneflow_draws_heard(keep_caller_stream=True):
    """Within: a ``oneflow_draws.DrawWatch`` (``.drew``) told of every call that reaches OneFlow's own random
    ops through libai_ext's wrappers, at the call: nothing waits for the rank's queued work while nothing
    draws.  ``keep_caller_stream``: OneFlow's CPU generator is saved right before the first such draw runs
    (one wait, then) and put back on leaving, so a discarded read advances nothing the caller draws."""
    saved = []

    def save():
        finish_queued_draws()
        saved.append(flow.default_generator.get_state())

    with oneflow_draws.listening(save if keep_caller_stream else None) as watch:
        try:
            yield watch
        finally:
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
    whichever streams run them.  Yields the ``oneflow_draws.DrawWatch``."""
    with oneflow_draws.listening(before_each=finish_queued_work) as watch:
        yield watch


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
