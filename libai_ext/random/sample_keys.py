"""Data randomness keyed by (seed, epoch, sample) instead of by who reads what, and when.

* ``epoch_permutation(seed, epoch, size)``: the order of a whole dataset in one epoch, from a
  generator of its own (the global numpy stream is left alone);
* ``keyed_streams(seed, epoch, index)``: python ``random``, numpy's global stream and OneFlow's
  CPU generator seeded for one sample, the caller's streams put back afterwards.

flowvision 0.1.0 draws from all three: ``RandomCrop``, ``RandomHorizontalFlip``,
``RandomVerticalFlip`` and ``RandomApply`` from numpy; ``RandomOrder``, ``RandomChoice``,
``RandomErasing`` and AutoAugment's ops from python; ``RandomResizedCrop``, ``ColorJitter`` and
``RandomRotation`` from OneFlow (``uniform_``, ``randint``, ``randperm`` on the CPU generator).
A sample augmented inside ``keyed_streams`` is the same whichever rank, worker or position
reads it (the idea of Grain's per-record seeds).

One limit of OneFlow 0.9.0 (see ``rng_state``): its CPU generator's saved state omits the
position within its 624-word block, so the caller's OneFlow CPU stream resumes from a block
boundary, not from the exact draw it had reached.  Python's and numpy's resume exactly.
"""
import contextlib
import hashlib
import random

import numpy as np
import oneflow as flow

from . import oneflow_draws

_PERMUTATION_STREAM = 0x5A3F  # keeps the epoch order apart from anything else keyed by (seed, epoch)


def epoch_permutation(seed, epoch, size):
    """A permutation of ``range(size)``, a pure function of (``seed``, ``epoch``)."""
    sequence = np.random.SeedSequence(int(seed), spawn_key=(_PERMUTATION_STREAM, int(epoch)))
    return np.random.Generator(np.random.PCG64(sequence)).permutation(int(size))


def sample_seeds(seed, epoch, index):
    """``(python, numpy, oneflow)`` seeds of one sample: unrelated for neighbouring keys."""
    digest = hashlib.blake2b(repr((int(seed), int(epoch), int(index))).encode(), digest_size=16).digest()
    python_seed = int.from_bytes(digest, "little")
    numpy_seed = int.from_bytes(digest[:4], "little")  # the legacy RandomState takes 32 bits
    oneflow_seed = int.from_bytes(digest[8:16], "little") >> 1  # OneFlow wants a non-negative int64
    return python_seed, numpy_seed, oneflow_seed


_draws_seen = -1


def _finish_queued_draws(only_after_draws=False):
    """Wait for OneFlow's queued kernels: an eager op reads its generator when it runs, not when it
    is queued, so a draw still queued would see the next stream.  ``only_after_draws``: not when no
    OneFlow draw was made since the last wait (known while ``oneflow_draws`` watches them)."""
    global _draws_seen
    count = oneflow_draws.draw_count()
    if only_after_draws and oneflow_draws.watching() and count == _draws_seen:
        return
    flow._oneflow_internal.eager.Sync()
    _draws_seen = count


def seed_streams(seed, epoch, index):
    """Seed python, numpy's global stream and OneFlow's CPU generator for one sample."""
    python_seed, numpy_seed, oneflow_seed = sample_seeds(seed, epoch, index)
    _finish_queued_draws(only_after_draws=True)  # the previous sample's draws are its own
    random.seed(python_seed)
    np.random.seed(numpy_seed)
    flow.default_generator.manual_seed(oneflow_seed)


@contextlib.contextmanager
def preserved_streams():
    """The caller's python, numpy and OneFlow CPU streams, put back on leaving.

    Only the CPU generator: the keyed streams never touch a CUDA one (and loader workers,
    forked, must not).  OneFlow's state costs milliseconds to read and write, so callers
    wrap a whole batch, not each sample.
    """
    _finish_queued_draws()
    saved = random.getstate(), np.random.get_state(), flow.default_generator.get_state()
    try:
        yield
    finally:
        _finish_queued_draws()
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        flow.default_generator.set_state(saved[2])


@contextlib.contextmanager
def keyed_streams(seed, epoch, index):
    """One sample's streams while inside, the caller's afterwards."""
    with preserved_streams():
        seed_streams(seed, epoch, index)
        yield
