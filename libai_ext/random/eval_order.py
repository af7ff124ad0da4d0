"""The evaluation order of ``train.randomness="layout_invariant"``: one global walk of the test set.

LiBai's ``SingleRoundSampler`` gives each data-parallel rank a contiguous bucket of the test set,
and LiBai's evaluator stops after ``train.evaluation.eval_iter`` batches: a truncated evaluation
covers the first samples of every bucket, so dp2 evaluates other samples than 1 rank does (and
``model_best`` can differ between layouts).

The rule here: the test set is walked once, in dataset order (or, when the loader shuffles, as
LiBai main's image test loader does, in one permutation keyed by ``train.seed``).  Global batch
``k`` is positions ``[k B, (k + 1) B)``, where ``B = train.test_micro_batch_size x data parallel
size`` (the evaluation batch LiBai's ``test`` pads to), and data-parallel rank ``r`` takes its
contiguous slice of it.  ``eval_iter`` counts
these global batches, so an evaluation covers the first ``min(N, eval_iter x B)`` samples of the
test set: the same samples on every layout with the same global test batch, and the whole set on
every layout when ``eval_iter x B >= N`` (LiBai's default ``eval_iter`` is 1e5).

The last, incomplete global batch of ``L`` samples: every rank gets ``ceil(L / dp)`` rows, and the
ranks from ``L mod dp`` on end with one filler row (sample 0), which LiBai's ``pad_batch`` removes
(the convention of ``SingleRoundSampler``, whose filler rows it was written for).
"""
import math

import numpy as np
from oneflow.utils.data import Sampler

from .sample_keys import epoch_order

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
