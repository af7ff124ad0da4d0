"""The evaluation order of ``train.randomness="layout_invariant"``: one global walk of the test set.

LiBai's ``SingleRoundSampler`` gives each data-parallel rank a contiguous bucket and ``eval_iter`` truncates each, so
a truncated evaluation scores other samples on dp2 than on 1 rank.  Here the test set is walked once, in dataset
order (or one permutation keyed by ``train.seed`` when the loader shuffles); global batch ``k`` is positions
``[k B, (k + 1) B)``, ``B = train.test_micro_batch_size x data parallel size``, and rank ``r`` takes its contiguous
slice of it (what an evaluation then covers: docs/data_order.md#evaluation).  In the last, incomplete global batch of
``L`` samples every rank gets ``ceil(L / dp)`` rows, the ranks from ``L mod dp`` on ending with one filler row
(sample 0) that LiBai's ``pad_batch`` removes (``SingleRoundSampler``'s convention).
"""
import math

import numpy as np
from oneflow.utils.data import Sampler

from .global_order import epoch_order

_FILLER = 0


class GlobalOrderTestSampler(Sampler):
    """``SingleRoundSampler``'s arguments; yields this rank's share of each global test batch."""

    def __init__(self, dataset, micro_batch_size, shuffle=False, data_parallel_rank=0, data_parallel_size=1,
                 seed=0):
        if int(micro_batch_size) < 1:
            raise ValueError(f"train.test_micro_batch_size={micro_batch_size} must be at least 1")
        self.dataset = dataset
        self.data_size = len(dataset)
        self.micro_batch_size = int(micro_batch_size)
        self.data_parallel_rank = int(data_parallel_rank)
        self.data_parallel_size = int(data_parallel_size)
        self.global_batch_size = self.micro_batch_size * self.data_parallel_size
        self.shuffle = bool(shuffle)
        self.seed = int(seed)

    def __iter__(self):
        if not self.data_size:
            return
        order = epoch_order(self.seed, 0, self.data_size) if self.shuffle else np.asarray
        for start in range(0, self.data_size, self.global_batch_size):
            first, real, rows = self._share(min(self.global_batch_size, self.data_size - start))
            indices = order(np.arange(start + first, start + first + real)).tolist()
            yield indices + [_FILLER] * (rows - real)

    def _share(self, batch):
        """This rank's (first row, real rows, rows) of a global batch of ``batch`` samples."""
        rows, remain = divmod(batch, self.data_parallel_size)
        rank = self.data_parallel_rank
        real = rows + (rank < remain)
        return rank * rows + min(rank, remain), real, rows + (remain > 0)

    def __len__(self):
        return math.ceil(self.data_size / self.global_batch_size)
