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
from oneflow.utils.data import get_worker_info

from .devices import own_cuda_device, own_cuda_generator

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


def _finish_queued_draws():
    # An eager op reads its generator when it runs, not when it is queued: a draw still queued
    # would see the other stream.
    flow._oneflow_internal.eager.Sync()


def seed_streams(seed, epoch, index):
    """Seed python, numpy's global stream and OneFlow's CPU generator for one sample."""
    python_seed, numpy_seed, oneflow_seed = sample_seeds(seed, epoch, index)
    _finish_queued_draws()  # the previous sample's draws are its own
    random.seed(python_seed)
    np.random.seed(numpy_seed)
    flow.default_generator.manual_seed(oneflow_seed)


class KeyedDrawOnGPU(RuntimeError):
    """A dataset drew from a CUDA generator inside keyed augmentation, which keys host streams only."""


@contextlib.contextmanager
def preserved_streams():
    """The caller's python, numpy and OneFlow CPU streams, put back on leaving.

    Draws on the GPU are refused, not keyed: re-seeding this rank's CUDA generator per sample
    would make OneFlow wait for the device at every sample, and putting the caller's CUDA stream
    back relies on OneFlow 0.9.0's CUDA generator state, which may not hold every offset its
    kernels advance.  So where this process can draw on CUDA (a CUDA host, outside loader workers,
    which cannot use CUDA), this rank's CUDA generator state is read on entry and compared on
    leaving (two device synchronisations per batch): a dataset that drew from it raises
    ``KeyedDrawOnGPU``.  OneFlow's state costs milliseconds to read and write, so callers wrap a
    whole batch, not each sample.
    """
    _finish_queued_draws()
    saved = random.getstate(), np.random.get_state(), flow.default_generator.get_state()
    cuda = _own_cuda_generator_in_reach()
    cuda_before = None if cuda is None else cuda.get_state().numpy()
    try:
        yield
    finally:
        _finish_queued_draws()
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        flow.default_generator.set_state(saved[2])
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
