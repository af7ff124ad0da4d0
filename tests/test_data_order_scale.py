"""The global data order at scale, on one host: dp 32, 64 and 128, global batches up to 4,096, 10**9 samples.

Each data-parallel rank's sampler (``GlobalOrderBatchSampler``, the one ``ConsistentBatchTrainer`` builds) is
computed in this process for every rank; the union of a step over the ranks must be the 1-rank step, sample for
sample.  Stock LiBai's ``CyclicSampler`` is run the same way and seen to read other samples (each rank a bucket
of its own), and to hold its epoch as a Python list (memory growing with the dataset).
"""
import itertools
import tracemalloc
import types

import numpy as np
import pytest

from libai_ext.random.global_order import GlobalOrderBatchSampler
from libai_ext.data.position import DataPosition, resume_position

BILLION = 10 ** 9
SEED = 1234


class Sized:
    """A dataset of ``n`` samples that is never read (the samplers only ask its length)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def sampler(n, dp, rank, micro, acc, consumed=0):
    return GlobalOrderBatchSampler(Sized(n), micro, shuffle=True, consumed_samples=consumed, data_parallel_rank=rank,
                                   data_parallel_size=dp, seed=SEED, num_accumulation_steps=acc)


def step_union(samplers, steps):
    """``steps`` optimizer steps: per step, its micro-batches in order, each the concatenation over ranks (in
    rank order) of their batches."""
    iterators = [iter(s) for s in samplers]
    per_step = samplers[0].batches_per_step
    out = []
    for _ in range(steps):
        ranks = [[next(it) for _ in range(per_step)] for it in iterators]
        out.append(np.concatenate([batches[m] for m in range(per_step) for batches in ranks]))
    return out


def one_rank(n, global_batch, consumed, steps):
    return step_union([sampler(n, 1, 0, global_batch, 1, consumed)], steps)


# (dp, micro-batch, accumulation): global batches 1,024 to 4,096
LAYOUTS = [(32, 32, 4), (32, 8, 2), (64, 16, 4), (64, 8, 1), (128, 8, 4), (128, 32, 1), (128, 4, 2)]


@pytest.mark.parametrize("dp,micro,acc", LAYOUTS)
def test_every_step_is_the_one_rank_step(dp, micro, acc):
    """At the start, deep inside the epoch and across the end of the first epoch of 10**9 samples."""
    global_batch = dp * micro * acc
    per_epoch = BILLION // global_batch * global_batch
    starts = [0, 123_456 * global_batch, per_epoch - 2 * global_batch]
    checked = 0
    for consumed in starts:
        ranks = [sampler(BILLION, dp, r, micro, acc, consumed) for r in range(dp)]
        got = step_union(ranks, 4)
        want = one_rank(BILLION, global_batch, consumed, 4)
        for g, w in zip(got, want):
            assert len(g) == global_batch and len(np.unique(g)) == global_batch  # no duplicate
            np.testing.assert_array_equal(g, w)  # none missing, same positions
            assert 0 <= g.min() and g.max() < BILLION
            checked += 1
    assert checked == 12


def test_the_epoch_boundary_starts_a_new_permutation():
    dp, micro, acc = 128, 8, 4
    global_batch = dp * micro * acc
    per_epoch = BILLION // global_batch * global_batch
    steps = step_union([sampler(BILLION, dp, r, micro, acc, per_epoch - global_batch) for r in range(dp)], 2)
    assert len(np.intersect1d(steps[0], steps[1])) < global_batch  # epoch 1's first step: another order
    np.testing.assert_array_equal(steps[1], one_rank(BILLION, global_batch, per_epoch, 1)[0])


def test_stock_cyclic_sampler_reads_other_samples_at_dp32():
    """Stock LiBai's sampler at dp 32: the ranks' union of the first step is not the 1-rank step."""
    from libai.data.samplers import CyclicSampler
    n, dp, micro = 10 ** 5, 32, 8
    union = np.concatenate([next(iter(CyclicSampler(Sized(n), micro, data_parallel_rank=r, data_parallel_size=dp)))
                            for r in range(dp)])
    single = np.array(next(iter(CyclicSampler(Sized(n), micro * dp))))
    assert len(union) == len(single) == micro * dp
    assert not np.array_equal(union, single)
    # libai_ext's sampler on the same layout: the same samples as 1 rank
    ours = step_union([sampler(n, dp, r, micro, 1) for r in range(dp)], 1)[0]
    np.testing.assert_array_equal(ours, one_rank(n, micro * dp, 0, 1)[0])


def peak_bytes(build_and_read):
    tracemalloc.start()
    try:
        build_and_read()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def read_steps(n, steps=8, dp=128, micro=8, acc=4):
    """What one rank's loader does: build its sampler, read ``steps`` optimizer steps."""
    def run():
        it = iter(sampler(n, dp, dp - 1, micro, acc, consumed=(n // 3) // (dp * micro * acc) * dp * micro * acc))
        for _ in itertools.repeat(None, steps * acc):
            next(it)
    return run


def test_loader_memory_does_not_grow_with_the_dataset():
    small, large = peak_bytes(read_steps(10 ** 6)), peak_bytes(read_steps(BILLION))
    assert large < 1.25 * small + 16 * 1024, (small, large)  # O(1): the same peak for 10**6 and 10**9 samples
    assert large < 1024 * 1024  # and small: a batch's indices, a few round keys


def test_stock_sampler_memory_grows_with_the_dataset():
    """Stock LiBai's CyclicSampler lists its epoch bucket: 10x the dataset, about 10x the memory."""
    from libai.data.samplers import CyclicSampler

    def stock(n):
        def run():
            next(iter(CyclicSampler(Sized(n), 8, data_parallel_rank=0, data_parallel_size=4)))
        return run
    small, large = peak_bytes(stock(10 ** 5)), peak_bytes(stock(10 ** 6))
    assert large > 5 * small, (small, large)


def saved_position(ranks):
    """What rank 0's checkpoint holds after its loader delivered up to its sampler's position."""
    loader = types.SimpleNamespace(sampler=ranks[0], delivered=ranks[0].position)
    return DataPosition(loader).state_dict()


@pytest.mark.parametrize("new_dp,new_micro,new_acc", [(16, 16, 4), (64, 4, 4), (64, 8, 2)])
def test_resume_from_32_8_4_continues_at_the_same_sample(new_dp, new_micro, new_acc):
    """A run on (32, 8, 4) (dp 32) checkpointed after 5 steps, resumed on (16, 8, 8) (dp 16) and (64, 4, 4)
    (dp 64), each with the global batch of 1,024 split otherwise."""
    dp, micro, acc = 32, 8, 4
    global_batch = dp * micro * acc
    consumed = 777_777 * global_batch
    ranks = [sampler(BILLION, dp, r, micro, acc, consumed) for r in range(dp)]
    before = step_union(ranks, 5)
    saved = saved_position(ranks)
    uninterrupted = np.concatenate(step_union([sampler(BILLION, 1, 0, global_batch, 1, consumed)], 9)[5:])

    new_global = new_dp * new_micro * new_acc
    resumed = [sampler(BILLION, new_dp, r, new_micro, new_acc) for r in range(new_dp)]
    for s in resumed:
        s.position = resume_position(saved, s)
    after = np.concatenate(step_union(resumed, 4 * global_batch // new_global))
    assert len(after) == 4 * global_batch
    np.testing.assert_array_equal(after, uninterrupted)  # the next sample, and every one after it
    assert not np.intersect1d(after, np.concatenate(before)).size  # nothing read twice


def test_stock_resume_onto_another_dp_reads_other_samples():
    """Stock LiBai resumes its CyclicSampler from consumed_samples: from dp 32 onto dp 16 with the same global batch,
    the next step's samples differ from the uninterrupted run's (each rank's bucket moves with the dp size)."""
    from libai.data.samplers import CyclicSampler

    n, micro, steps = 10 ** 5, 8, 5
    global_batch = 32 * micro

    def union(dp, consumed):
        return np.concatenate([next(iter(CyclicSampler(Sized(n), global_batch // dp, consumed_samples=consumed,
                                                       data_parallel_rank=r, data_parallel_size=dp)))
                               for r in range(dp)])
    uninterrupted, resumed = union(32, steps * global_batch), union(16, steps * global_batch)
    assert len(uninterrupted) == len(resumed) == global_batch
    assert not np.array_equal(np.sort(uninterrupted), np.sort(resumed))
