"""The keyed permutation behind the epoch order: a bijection, computed per position, statistically sane."""
import numpy as np
import pytest

from libai_ext.random import IndexShuffle, epoch_order

SIZES = [1, 2, 3, 4, 5, 7, 8, 97, 255, 256, 257, 1000, 4099, 65536, 65537, 100003]  # primes, powers of 2 and +-1


@pytest.mark.parametrize("size", SIZES)
def test_every_size_is_a_bijection(size):
    for key in ([0], [3, 0x5A3F, 1], [2 ** 32 - 1, 7]):
        order = IndexShuffle(size, key)(np.arange(size))
        assert order.dtype == np.int64 and np.array_equal(np.sort(order), np.arange(size)), (size, key)


def test_positions_are_computed_one_by_one():
    """Any batch of positions, in any order, reads the entries of the one permutation."""
    shuffle = IndexShuffle(100003, [5, 1])
    whole = shuffle(np.arange(100003))
    picks = np.array([100002, 0, 17, 50000, 17])
    assert np.array_equal(shuffle(picks), whole[picks])
    assert shuffle([]).size == 0


def test_the_key_names_the_permutation():
    orders = [IndexShuffle(1000, key)(np.arange(1000)) for key in ([1, 0], [1, 1], [2, 0], [1, 0])]
    assert np.array_equal(orders[0], orders[3])
    assert all(not np.array_equal(orders[0], other) for other in orders[1:3])
    assert not np.array_equal(epoch_order(3, 0, 1000)(np.arange(1000)), epoch_order(3, 1, 1000)(np.arange(1000)))


def test_first_position_is_roughly_uniform_over_seeds():
    """Where position 0 lands, over 5000 seeds, for a size that is not a power of two (cycle walking)."""
    size, seeds = 10, 5000
    counts = np.bincount([int(epoch_order(seed, 0, size)([0])[0]) for seed in range(seeds)], minlength=size)
    expected = seeds / size
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 33.7, (counts, chi2)  # the 0.9999 quantile of chi-square with 9 degrees of freedom


def test_fixed_points_and_neighbours_as_a_random_permutation_has_them():
    """A random permutation has one fixed point on average, and keeps few neighbours adjacent."""
    size, seeds = 1000, 200
    fixed, adjacent = [], []
    for seed in range(seeds):
        order = epoch_order(seed, 0, size)(np.arange(size))
        fixed.append(int((order == np.arange(size)).sum()))
        adjacent.append(int((np.abs(np.diff(order)) == 1).sum()))  # expected 2 (n - 1) / n ~ 2
    assert 0.7 < np.mean(fixed) < 1.3, np.mean(fixed)
    assert 1.6 < np.mean(adjacent) < 2.4, np.mean(adjacent)


def test_bad_sizes_and_positions_are_refused():
    with pytest.raises(ValueError, match="size"):
        IndexShuffle(0, [1])
    with pytest.raises(IndexError, match=r"\[0, 10\)"):
        IndexShuffle(10, [1])([3, 10])
    with pytest.raises(IndexError):
        IndexShuffle(10, [1])([-1])


def test_large_sizes_need_no_memory_of_their_own():
    """A 10^12-sample order: a batch of positions costs only that batch."""
    shuffle = epoch_order(0, 0, 10 ** 12)
    batch = shuffle(np.arange(10 ** 12 - 1000, 10 ** 12))
    assert len(set(batch.tolist())) == 1000 and batch.min() >= 0 and batch.max() < 10 ** 12
