"""The test loader's global order, in process (through LiBai's evaluator on several ranks:
test_global_order_layouts.py).

Each global batch is read off the ranks' shares the way LiBai's ``pad_batch`` does: the shares side
by side, the filler row that ends each of the last ``lack`` shares squeezed out.
"""
import pytest
from libai.data.samplers import SingleRoundSampler

from libai_ext.random.eval_order import GlobalOrderTestSampler


def evaluated(dp, micro, size, eval_iter=10 ** 5, sampler=GlobalOrderTestSampler):
    """The samples LiBai's evaluator scores, in order, on ``dp`` ranks with ``eval_iter``."""
    shares = [list(sampler(range(size), micro, data_parallel_rank=r, data_parallel_size=dp)) for r in range(dp)]
    batches = len(sampler(range(size), micro, data_parallel_size=dp))
    assert all(len(s) == batches for s in shares)
    lack = (dp - size % dp) % dp  # what LiBai's evaluator computes from the dataset size
    out = []
    for k in range(min(eval_iter, batches)):
        rows = [share[k] for share in shares]
        assert len({len(r) for r in rows}) == 1, "shares of one global batch must have one size"
        if k == batches - 1 and lack:
            rows = [r[:-1] if rank >= dp - lack else r for rank, r in enumerate(rows)]
        out.extend(i for r in rows for i in r)
    return out


@pytest.mark.parametrize("size", [45, 48, 1, 7])
@pytest.mark.parametrize("dp", [2, 3, 4])
def test_the_whole_set_once_in_dataset_order(size, dp):
    assert evaluated(dp, 4, size) == list(range(size))


@pytest.mark.parametrize("eval_iter", [1, 3, 5])
def test_a_truncated_evaluation_covers_the_same_samples_with_the_same_global_test_batch(eval_iter):
    one = evaluated(1, 8, 45, eval_iter)
    assert one == list(range(min(45, 8 * eval_iter)))
    assert evaluated(2, 4, 45, eval_iter) == evaluated(4, 2, 45, eval_iter) == one
    # LiBai's SingleRoundSampler: each rank evaluates the head of its own bucket.
    stock = evaluated(2, 4, 45, eval_iter, sampler=SingleRoundSampler)
    assert sorted(stock) != one


def test_filler_rows_end_the_last_shares():
    """45 samples, dp 4, micro 4: the last global batch holds 13, so ranks 1-3 end with a filler (sample 0)."""
    last = [list(GlobalOrderTestSampler(range(45), 4, data_parallel_rank=r, data_parallel_size=4))[-1]
            for r in range(4)]
    assert last == [[32, 33, 34, 35], [36, 37, 38, 0], [39, 40, 41, 0], [42, 43, 44, 0]]


def test_bad_batch_size_names_the_config_key():
    with pytest.raises(ValueError, match=r"train\.test_micro_batch_size"):
        GlobalOrderTestSampler(range(4), 0)
