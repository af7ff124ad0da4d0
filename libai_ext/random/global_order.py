"""A batch sampler whose global batches depend neither on the data-parallel size nor on accumulation.

LiBai's ``CyclicSampler`` gives each data-parallel rank a contiguous bucket.  Here every rank walks the same keyed
order of the whole dataset (``epoch_order``); the global batch of optimizer step ``t`` is its next
``micro x dp x acc`` entries, split into micro-batches and ranks the same way on every layout
(docs/data_order.md#global-batches-data-parallelism-and-gradient-accumulation).  A rank yields its rows as ``acc``
micro-batches in order (LiBai's eager trainer; LiBai main's graph trainer joins them per rank), or whole
(``whole_step=True``: LiBai 0.1.1's graph trainer, whose loader batch is ``micro x acc`` and whose graph splits it
along dim 0).  ``CyclicSampler``'s conventions hold, so LiBai's trainers need nothing else: it cycles forever,
``consumed_samples`` counts *global* samples, an epoch's tail that cannot fill a global batch is skipped, and
``len()`` is the dataset size.  Each batch is an ``EpochBatch``: dataset indices carrying their ``BatchPosition``.

``IndexShuffle(n, key)(positions)``, the keyed permutation behind that order, is the entry at each position: an
epoch order that is never built.  As Grain's index shuffle, written from the textbook construction: a balanced
Feistel network on ``2 * half`` bits (the smallest even width holding ``n - 1``: a domain below ``4 n``), whose
round function (the round key XORed in, SplitMix64's finaliser, cut to ``half`` bits) may be anything, as each
round is a bijection; then cycle walking: a value outside ``[0, n)`` is enciphered again, which keeps a bijection
of ``[0, n)`` (under 4 passes expected).  Vectorised with numpy's wrapping uint64 arithmetic; ``n`` and positions
up to ``2**62``.
"""
import dataclasses
from typing import NamedTuple

import numpy as np
from oneflow.utils.data import Sampler

from .draws import key_words


ROUNDS = 6  # Luby-Rackoff: 4 rounds of a random function already give a pseudo-random permutation
MAX_SIZE = 2 ** 62
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)
_SHIFTS = tuple(np.uint64(s) for s in (30, 27, 31))


class IndexShuffle:
    """The permutation of ``range(size)`` that ``key`` (a sequence of words for ``draws.key``) names."""

    def __init__(self, size, key):
        size = int(size)
        if not 1 <= size <= MAX_SIZE:
            raise ValueError(f"an index shuffle needs 1 <= size <= 2**62, got {size}")
        self.size = size
        bits = max(2, (size - 1).bit_length())
        self.half = np.uint64((bits + 1) // 2)
        self.mask = np.uint64((1 << int(self.half)) - 1)
        self.round_keys = np.array(key_words(*key, count=ROUNDS, bits=64), dtype=np.uint64)

    def __call__(self, positions):
        """The permuted index at each of ``positions`` (array-like of ints in ``[0, size)``), as int64."""
        positions = np.asarray(positions, dtype=np.int64)
        if positions.size and (positions.min() < 0 or positions.max() >= self.size):
            raise IndexError(f"positions must lie in [0, {self.size}); got [{positions.min()}, {positions.max()}]")
        out = positions.astype(np.uint64).reshape(-1)
        walking = np.arange(out.size)  # enciphered again while outside [0, size): cycle walking
        while walking.size:
            left, right = out[walking] >> self.half, out[walking] & self.mask
            for round_key in self.round_keys:  # the round function: SplitMix64's finaliser of right ^ round_key
                x = right ^ round_key
                x ^= x >> _SHIFTS[0]
                x *= _MIX_1
                x ^= x >> _SHIFTS[1]
                x *= _MIX_2
                x ^= x >> _SHIFTS[2]
                left, right = right, left ^ (x & self.mask)
            out[walking] = (left << self.half) | right
            walking = walking[out[walking] >= self.size]
        return out.astype(np.int64).reshape(positions.shape)


def epoch_order(seed, epoch, size):
    """The order of ``range(size)`` in ``epoch``: ``epoch_order(...)(positions)`` -> dataset indices.

    A pure function of (``seed``, ``epoch``), computed per position: starting an epoch costs
    nothing whatever the dataset's size.
    """
    return IndexShuffle(size, (int(seed), "order", int(epoch)))


class BatchPosition(NamedTuple):
    """Where one loader batch lies: row ``i`` is sample ``first_position + i`` of the global batch of
    optimizer step ``step`` (counted from the run's start) in ``epoch``; ``micro_step`` says which
    of this rank's batches of that step it is.  A batch of the rank's whole share (LiBai 0.1.1's
    graph mode, ``micro_step`` 0) is one run of rows per micro-batch instead, ``first_position`` the
    first run's (``GlobalOrderBatchSampler.step_positions``)."""
    epoch: int
    step: int
    micro_step: int
    first_position: int
    rows: int


class EpochBatch(list):
    """A batch of dataset indices, and where it lies in the global order (``BatchPosition``'s fields)."""

    def __init__(self, indices, epoch, step=0, micro_step=0, first_position=0):
        super().__init__(indices)
        self.epoch = int(epoch)
        self.step = int(step)
        self.micro_step = int(micro_step)
        self.first_position = int(first_position)

    @property
    def position(self):
        return BatchPosition(self.epoch, self.step, self.micro_step, self.first_position, len(self))


@dataclasses.dataclass(frozen=True)
class OrderPosition:
    """The next loader batch: the ``batch``-th of this rank's batches of the global batch that starts
    at ``step_start`` of ``epoch``'s order, optimizer step ``step``, after ``consumed_samples``."""
    epoch: int
    step_start: int
    batch: int
    step: int
    consumed_samples: int


class GlobalOrderBatchSampler(Sampler):
    """``CyclicSampler``'s arguments (``micro_batch_size``: LiBai's ``train.train_micro_batch_size``)
    plus the accumulation; yields this rank's ``EpochBatch``-es of each global batch."""

    def __init__(self, dataset, micro_batch_size, shuffle=True, consumed_samples=0, data_parallel_rank=0,
                 data_parallel_size=1, seed=0, num_accumulation_steps=1, whole_step=False):
        _check_layout(micro_batch_size, data_parallel_rank, data_parallel_size, consumed_samples,
                      num_accumulation_steps)
        self.dataset = dataset
        self.data_size = len(dataset)
        self.micro_batch_size = int(micro_batch_size)
        self.num_accumulation_steps = int(num_accumulation_steps)
        self.data_parallel_rank = int(data_parallel_rank)
        self.data_parallel_size = int(data_parallel_size)
        self.share = self.micro_batch_size * self.num_accumulation_steps  # one rank's rows of a global batch
        self.global_batch_size = self.share * self.data_parallel_size
        self.whole_step = bool(whole_step)
        self.batch_size = self.share if self.whole_step else self.micro_batch_size
        self.batches_per_step = 1 if self.whole_step else self.num_accumulation_steps
        if self.data_size < self.global_batch_size:
            raise ValueError(
                f"the training dataset has {self.data_size} samples, fewer than one global batch of "
                f"{self.global_batch_size} (train.train_micro_batch_size x data parallel size x "
                "train.num_accumulation_steps)")
        self.samples_per_epoch = self.data_size // self.global_batch_size * self.global_batch_size
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self._order = None
        self.position = self.position_at(consumed_samples)

    @property
    def consumed_samples(self):
        return self.position.consumed_samples

    def set_consumed_samples(self, consumed_samples):
        self.position = self.position_at(consumed_samples)

    def position_at(self, consumed_samples):
        """The position after ``consumed_samples`` global samples read with this global batch from the start."""
        consumed_samples = int(consumed_samples)
        epoch, in_epoch = divmod(consumed_samples, self.samples_per_epoch)
        steps, in_step = divmod(in_epoch, self.global_batch_size)
        batch, rest = divmod(in_step, self.batch_size * self.data_parallel_size)
        if rest:
            raise ValueError(f"dataloader.consumed_samples={consumed_samples} is not at a loader batch boundary "
                             f"(multiples of {self.batch_size * self.data_parallel_size} global samples)")
        steps_per_epoch = self.samples_per_epoch // self.global_batch_size
        return OrderPosition(epoch, steps * self.global_batch_size, batch, epoch * steps_per_epoch + steps,
                             consumed_samples)

    def advance(self, position):
        """The position after the batch at ``position``."""
        epoch, step_start, batch, step = position.epoch, position.step_start, position.batch + 1, position.step
        if batch == self.batches_per_step:
            batch, step, step_start = 0, step + 1, step_start + self.global_batch_size
            if step_start + self.global_batch_size > self.data_size:  # the epoch's tail cannot fill a global batch
                epoch, step_start = epoch + 1, 0
        consumed = position.consumed_samples + self.batch_size * self.data_parallel_size
        return OrderPosition(epoch, step_start, batch, step, consumed)

    def batch_position(self, position):
        """Where this rank's batch at ``position`` lies (no index computed): its first row is the first of
        micro-batch ``m`` (0 for a whole step's batch), at ``(m * dp + rank) * micro`` in the step."""
        micro = 0 if self.whole_step else position.batch
        first = (micro * self.data_parallel_size + self.data_parallel_rank) * self.micro_batch_size
        return BatchPosition(position.epoch, position.step, position.batch, first, self.batch_size)

    def step_positions(self, micro_step):
        """The positions in the step of the rows of this rank's ``micro_step``-th batch of a step (``batch_position``'s
        first row of each micro-batch it holds, onwards)."""
        micros = np.arange(self.num_accumulation_steps) if self.whole_step else np.array([micro_step])
        starts = (micros * self.data_parallel_size + self.data_parallel_rank) * self.micro_batch_size
        return (starts[:, None] + np.arange(self.micro_batch_size)).reshape(-1)

    def batch_at(self, position):
        """This rank's ``EpochBatch`` at ``position``, from ``position.epoch``'s order (the last epoch's is kept)."""
        if self._order is None or self._order[0] != position.epoch:
            order = epoch_order(self.seed, position.epoch, self.data_size) if self.shuffle else np.asarray
            self._order = (position.epoch, order)
        indices = self._order[1](position.step_start + self.step_positions(position.batch))
        return EpochBatch(indices.tolist(), *self.batch_position(position)[:4])

    def __iter__(self):
        prefetched = None
        while True:
            position = self.position
            if getattr(self.dataset, "supports_prefetch", False) and position.epoch != prefetched:
                self.dataset.prefetch(self._rest_of_epoch(position))
                prefetched = position.epoch
            batch = self.batch_at(position)
            self.position = self.advance(position)
            yield batch

    def _rest_of_epoch(self, position):
        indices, epoch = [], position.epoch
        while position.epoch == epoch:
            indices.extend(self.batch_at(position))
            position = self.advance(position)
        return indices

    def __len__(self):
        return self.data_size


def _check_layout(micro_batch_size, data_parallel_rank, data_parallel_size, consumed_samples, accumulation):
    if int(micro_batch_size) < 1:
        raise ValueError(f"train.train_micro_batch_size={micro_batch_size} must be at least 1")
    if int(accumulation) < 1:
        raise ValueError(f"train.num_accumulation_steps={accumulation} must be at least 1")
    if int(data_parallel_size) < 1 or not 0 <= int(data_parallel_rank) < int(data_parallel_size):
        raise ValueError(f"data parallel rank {data_parallel_rank} is outside the data parallel size "
                         f"{data_parallel_size} (train.dist.data_parallel_size)")
    if int(consumed_samples) < 0:
        raise ValueError(f"dataloader.consumed_samples={consumed_samples} must not be negative")
