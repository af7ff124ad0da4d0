"""The counter-based generator behind "layout_invariant" randomness: exact, a bijection, and random.

* the int32-op implementation (``counter_rng``, what eager ranks and graphs run) gives exactly the
  bits of the bit-operation specification (``counter_spec``): whole tensors, slices cut anywhere,
  micro-batches of an accumulated step, indices past 2**32, keys from a step tensor;
* each step is a bijection (``R`` has an exact inverse; ``Q`` is Rivest's permutation polynomial,
  the old ``h * (h - a)`` is shown not to be one), so no two elements of a call share their bits,
  and no index is a fixed point of every key;
* statistics on >= 10**8 bits: frequency, runs, serial pairs, birthday spacings, per bit position,
  on consecutive and strided indices and across calls; the drop rate of every position, index 0
  included; no mirrored pairs.

Known-answer vectors pin the function: a change to the generator must change them on purpose.
The exhaustive check over all 2**32 indices of one key is a script: benchmarks/generator_bijection.py.
"""
import numpy as np
import oneflow as flow
import pytest
from scipy import stats

from libai_ext.random import counter_spec as spec
from libai_ext.random.counter_rng import (
    call_keys, counter_bits, derive_keys, keep_mask, local_counter_bits, local_keep_mask, step_key, stream_keys,
    stream_words,
)
from libai_ext.random.global_index import StepRows

KEYS = derive_keys(1234, "probe", 3)


def spec_bits(indices, keys=KEYS, permutation=spec.permute):
    """The specification's bits of ``indices`` (uint64 array, may exceed 2**32), as signed int32
    (``permutation``: ``spec.permute``, or ``spec.mask_permute`` for the words masks read)."""
    indices = np.asarray(indices, dtype=np.uint64)
    flat = indices.reshape(-1)  # (numpy scalars do not mix with Python ints in & as arrays do)
    unsigned = [np.uint64(k & spec.MASK32) for k in keys]
    out = permutation(flat & np.uint64(spec.MASK32), unsigned, flat >> np.uint64(32))
    return ((out.astype(np.int64) + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32).reshape(indices.shape)


def box_indices(shape, lo, hi):
    flat = np.arange(int(np.prod(shape)), dtype=np.uint64).reshape(shape)
    return flat[tuple(slice(a, b) for a, b in zip(lo, hi))]


# ---- the tensor implementation is the specification -----------------------------------------------

# (keys, index, bits): pinned from counter_spec; the second is worked by hand in the docstring of
# test_known_answers.
KNOWN_ANSWERS = [
    ((1, 0, 1, 1, 1), 0, 0),
    ((1, 0, 1, 1, 1), 1, 4294770688),
    ((0x9E3779B1, 0x7F4A7C15, 0x85EBCA6B, 0xC2B2AE35, 0x27D4EB2F), 0, 2659806671),
    ((0x9E3779B1, 0x7F4A7C15, 0x85EBCA6B, 0xC2B2AE35, 0x27D4EB2F), 12345, 192126343),
    ((0x9E3779B1, 0x7F4A7C15, 0x85EBCA6B, 0xC2B2AE35, 0x27D4EB2F), 2 ** 32 - 1, 318600353),
    ((0x9E3779B1, 0x7F4A7C15, 0x85EBCA6B, 0xC2B2AE35, 0x27D4EB2F), 2 ** 40 + 7, 3694414015),
]


@pytest.mark.parametrize("keys, index, expected", KNOWN_ANSWERS)
def test_known_answers(keys, index, expected):
    """Keys (1, 0, 1, 1, 1), index 1, by hand (mod 2**32): A gives 1; R: 0x10000; Q: 0x10000 *
    0x1FFFF = 0xFFFF0000; R: 0xFFFF - 0x10000 = 0xFFFFFFFF (-1); Q: -1 * -3 = 3; R: 0x30000;
    Q: 0x30000 * 0x5FFFF = -0x30000 = 4294770688."""
    assert spec.permute(index % 2 ** 32, keys, index >> 32) == expected
    signed = tuple(spec.to_signed(k) for k in keys)
    if index < 2 ** 32:
        got = local_counter_bits((2 ** 32,), (index,), (index + 1,), signed).numpy()[0]
    else:
        got = local_counter_bits((2 ** 41,), (index,), (index + 1,), signed).numpy()[0]
    assert int(got) & spec.MASK32 == expected


@pytest.mark.parametrize("shape", [(7,), (64, 12), (4, 5, 6, 7), ()])
def test_whole_tensors_match_the_specification(shape):
    got = counter_bits(shape, KEYS).numpy()
    np.testing.assert_array_equal(got, spec_bits(np.arange(int(np.prod(shape))).reshape(shape)))


@pytest.mark.parametrize("shape, lo, hi", [
    ((64, 12), (1, 3), (3, 4)), ((64, 12), (0, 4), (64, 5)), ((4, 5, 6, 7), (1, 0, 2, 0), (3, 5, 3, 7)),
    ((4, 5, 6, 7), (0, 2, 0, 0), (4, 3, 6, 7)), ((4, 5, 6, 7), (2, 0, 0, 0), (3, 5, 6, 7)),
])
def test_slices_match_the_specification(shape, lo, hi):
    """What an eager rank computes for its shard, from local ops: the whole tensor's bits there."""
    got = local_counter_bits(shape, lo, hi, KEYS).numpy()
    np.testing.assert_array_equal(got, spec_bits(box_indices(shape, lo, hi)))


@pytest.mark.parametrize("lo, hi", [((2 ** 20 - 3, 5), (2 ** 20, 9)), ((2 ** 19 + 7, 0), (2 ** 19 + 9, 2 ** 13))])
def test_indices_past_two_to_the_32_match_the_specification(lo, hi):
    """A global tensor of 2**33 elements (its shards small): the high word of the index counts."""
    shape = (2 ** 20, 2 ** 13)
    got = local_counter_bits(shape, lo, hi, KEYS).numpy()
    rows = np.arange(lo[0], hi[0], dtype=np.uint64)[:, None] * np.uint64(shape[1])
    expected = spec_bits(rows + np.arange(lo[1], hi[1], dtype=np.uint64)[None, :])
    np.testing.assert_array_equal(got, expected)
    low_only = spec_bits((rows + np.arange(lo[1], hi[1], dtype=np.uint64)[None, :]) & np.uint64(spec.MASK32))
    assert not np.array_equal(got, low_only), "the high word changed nothing"


def test_local_tensors_past_int32_arange_are_indexed_in_int64():
    """OneFlow's int32 arange wraps at 2**31; a run that long is indexed in int64 (checked on a
    slice whose run starts past 2**31 within a 1-D tensor)."""
    shape = (2 ** 33,)
    lo, hi = (2 ** 31 + 5,), (2 ** 31 + 70,)
    np.testing.assert_array_equal(local_counter_bits(shape, lo, hi, KEYS).numpy(),
                                  spec_bits(np.arange(lo[0], hi[0], dtype=np.uint64)))


@pytest.mark.parametrize("acc, dp", [(2, 2), (4, 1), (3, 2)])
def test_micro_batches_draw_their_part_of_the_step(acc, dp):
    """Row i of micro-batch m on data-parallel rank r is position m*dp*s + r*s + i of the step:
    its bits are those of 1 rank with the whole global batch (eager slices and graph ops alike)."""
    rows_per_rank, cols = 3, 5
    micro_rows = rows_per_rank * dp
    whole = counter_bits((acc * micro_rows, cols), KEYS).numpy()
    checked = 0
    for m in range(acc):
        expected = whole[m * micro_rows:(m + 1) * micro_rows]
        for r in range(dp):  # a data-parallel shard, eager
            part = local_counter_bits((micro_rows, cols), (r * rows_per_rank, 0), ((r + 1) * rows_per_rank, cols),
                                      KEYS, rows=StepRows(acc, m)).numpy()
            np.testing.assert_array_equal(part, expected[r * rows_per_rank:(r + 1) * rows_per_rank])
            checked += 1
        traced = counter_bits((micro_rows, cols), KEYS, rows=StepRows(acc, flow.tensor([m], dtype=flow.int32)))
        np.testing.assert_array_equal(traced.numpy(), expected)
        checked += 1
    assert checked == acc * (dp + 1)


def keys_from_a_step_tensor(seed, stream, step, call):
    """What a graph computes: the draw's keys from the step key's words as int32 tensors (its input)."""
    hashed = tuple(flow.tensor([word], dtype=flow.int32) for word in step_key(seed, step))
    return tuple(int(k.item()) if isinstance(k, flow.Tensor) else k
                 for k in call_keys(stream_words(seed, stream), hashed, call))


def test_host_keys_equal_keys_from_a_step_tensor():
    """Eager layers derive a draw's keys on the host, graphs from the step key's int32 tensors."""
    checked = 0
    for step in (0, 1, 77, 2 ** 24 + 1, 2 ** 31 - 1):
        for call in (0, 1, 9):
            host = stream_keys(1234, "blocks.0.drop", step, call)
            assert host == keys_from_a_step_tensor(1234, "blocks.0.drop", step, call), (step, call)
            assert host[0] % 2 and all(d % 2 for d in host[2:]), "C and the d's must be odd"
            checked += 1
    assert checked == 15


# ---- a bijection ------------------------------------------------------------------------------

def edge_words():
    """Every word where trunc and floor division disagree most: both sides of each multiple of
    2**16, the whole block around 0, the extremes, and random words."""
    multiples = np.arange(-2 ** 15, 2 ** 15, dtype=np.int64) * 2 ** 16
    near = (multiples[:, None] + np.array([-1, 0, 1])[None, :]).ravel()
    around_zero = np.arange(-2 ** 17, 2 ** 17)
    extremes = np.array([-2 ** 31, -2 ** 31 + 1, 2 ** 31 - 1, 2 ** 31 - 2])
    rand = np.random.default_rng(0).integers(-2 ** 31, 2 ** 31, 2 ** 20)
    return np.unique(np.concatenate([near, around_zero, extremes, rand])) % 2 ** 32


def test_rotate_mix_has_an_exact_inverse_and_matches_the_int32_ops():
    from libai_ext.random.counter_rng import rotate_mix

    words = edge_words().astype(np.uint64)
    mixed = spec.rotate_mix(words)
    np.testing.assert_array_equal(spec.inverse_rotate_mix(mixed), words)
    signed = flow.tensor(((words.astype(np.int64) + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32))
    np.testing.assert_array_equal(rotate_mix(signed).numpy().astype(np.int64) % 2 ** 32, mixed.astype(np.int64))


def test_the_quadratic_is_a_permutation_and_the_old_round_is_not():
    """Rivest's criterion, checked exhaustively on 16-bit words: x (2x - d) permutes them for odd d;
    x (x - a), the previous generator's round, maps x and a - x to one value."""
    x = np.arange(2 ** 16, dtype=np.int64)
    for d in (1, 3, 0x8001, 0xFFFF):
        assert len(np.unique(x * (2 * x - d) % 2 ** 16)) == 2 ** 16
    for a in (1, 0x1234):
        assert len(np.unique(x * (x - a) % 2 ** 16)) < 2 ** 16


def test_no_two_elements_of_a_call_share_their_bits():
    bits = counter_bits((2 ** 24,), KEYS).numpy()
    assert len(np.unique(bits)) == 2 ** 24


def test_the_masks_rounds_match_the_int32_ops_and_lose_few_words():
    """The masks' R (``x * 2**16 + trunc(x / 2**16)``, one ``//``) from int32 ops is the specification's on
    the edge words; it is no bijection, but over 2**22 consecutive indices at most a handful of words
    repeat (2**16 - 1 meeting pairs of 2**32 per round: about 0.1 expected)."""
    from libai_ext.random.counter_rng import rotate_trunc

    words = edge_words().astype(np.uint64)
    signed = flow.tensor(((words.astype(np.int64) + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32))
    np.testing.assert_array_equal(rotate_trunc(signed).numpy().astype(np.int64) % 2 ** 32,
                                  spec.rotate_trunc(words).astype(np.int64))
    assert [spec.rotate_trunc(int(w)) for w in words[:1000]] == spec.rotate_trunc(words[:1000]).tolist()
    masks = spec_bits(np.arange(2 ** 22, dtype=np.uint64), permutation=spec.mask_permute)
    assert len(np.unique(masks)) >= 2 ** 22 - 8


# ---- random ----------------------------------------------------------------------------------------

def battery(words):
    """p-values (or |z| for the normal-scored ones) of a standard battery on 32-bit words."""
    words = np.ascontiguousarray(words.astype(np.uint32))
    bits = np.unpackbits(words.view(np.uint8))
    n, ones = bits.size, int(bits.sum())
    runs = 1 + int(np.count_nonzero(bits[1:] != bits[:-1]))
    share = ones / n
    by_position = np.unpackbits(words.view(np.uint8).reshape(-1, 4), axis=1).sum(0)
    high = (words >> np.uint32(16)).astype(np.int64)
    pairs = (high[:-1:2] >> 8) * 256 + (high[1::2] >> 8)
    return {
        "frequency |z|": abs(ones - n / 2) / np.sqrt(n / 4),
        "runs |z|": abs(runs - 2 * n * share * (1 - share)) / (2 * np.sqrt(n) * share * (1 - share)),
        "bit positions max |z|": float(np.max(np.abs(by_position - len(words) / 2) / np.sqrt(len(words) / 4))),
        "16-bit values p": stats.chisquare(np.bincount(high, minlength=2 ** 16)).pvalue,
        "serial byte pairs p": stats.chisquare(np.bincount(pairs, minlength=2 ** 16)).pvalue,
        "birthday spacings p": birthday_spacings(words),
    }


def birthday_spacings(words, birthdays=512, days=2 ** 24):
    """Marsaglia's test: duplicate spacings among 512 birthdays in a 2**24-day year ~ Poisson(2)."""
    days_of = (words >> np.uint32(8)).astype(np.int64)
    groups = len(days_of) // birthdays
    sorted_days = np.sort(days_of[:groups * birthdays].reshape(groups, birthdays), axis=1)
    spacings = np.sort(np.diff(sorted_days, axis=1), axis=1)
    duplicates = np.count_nonzero(spacings[:, 1:] == spacings[:, :-1], axis=1)
    expected_mean = birthdays ** 3 / (4 * days)
    top = 8
    observed = np.bincount(np.minimum(duplicates, top), minlength=top + 1)
    expected = stats.poisson.pmf(np.arange(top + 1), expected_mean) * groups
    expected[-1] = stats.poisson.sf(top - 1, expected_mean) * groups
    return stats.chisquare(observed, expected).pvalue


def assert_random(words, what):
    results = battery(words)
    for name, value in results.items():
        if name.endswith("|z|"):
            assert value < 5, f"{what}: {name} = {value:.2f}"
        else:
            assert value > 1e-5, f"{what}: {name} = {value:.3g}"
    return results


@pytest.mark.parametrize("permutation", ["permute", "mask_permute"])
@pytest.mark.parametrize("stride", [1, 4, 2 ** 8, 2 ** 12])
def test_battery_on_consecutive_and_strided_indices(stride, permutation):
    """>= 10**8 bits per case (2**22 words): one call's elements along a row (stride 1), and down
    a column of a matrix whose rows are 4 ... 4096 elements long; the permutation and the masks' words."""
    count = 2 ** 22 if stride < 2 ** 12 else 2 ** 20
    indices = np.arange(count, dtype=np.uint64) * np.uint64(stride)
    words = spec_bits(indices, permutation=getattr(spec, permutation))
    assert words.size * 32 >= (10 ** 8 if stride < 2 ** 12 else 3 * 10 ** 7)
    assert_random(words, f"{permutation}, stride {stride}")


def test_battery_across_calls_and_layers():
    """Element 0 to 15 of 2**14 consecutive steps of one layer, of 2**14 layers at one step, and of
    2**14 calls of one layer at one step (keys from one step hash, affine in it)."""
    steps = [stream_keys(7, "blocks.0.drop", step) for step in range(2 ** 14)]
    layers = [stream_keys(7, f"blocks.{layer}.drop", 0) for layer in range(2 ** 14)]
    calls = [stream_keys(7, "blocks.0.drop", 3, call) for call in range(2 ** 14)]
    checked = 0
    for what, keys in (("steps", steps), ("layers", layers), ("calls", calls)):
        columns = [np.array(k, dtype=np.int64) & spec.MASK32 for k in zip(*keys)]
        words = np.concatenate([spec.mask_permute(np.full(len(keys), i, dtype=np.uint64),
                                                  [c.astype(np.uint64) for c in columns]) for i in range(16)])
        assert_random(words, what)
        checked += 1
    assert checked == 3


def test_every_position_drops_at_its_rate_index_0_included():
    """Over 20,000 steps of one layer, each of 64 mask positions (both halves of 32 words) is
    dropped at p = 0.1 within 5 sigma (an older generator never dropped position 0: its hash fixed 0)."""
    rate, steps, positions = 0.1, 20000, 64
    keys = [stream_keys(7, "blocks.0.drop", step) for step in range(steps)]
    columns = [np.array(k, dtype=np.int64) & spec.MASK32 for k in zip(*keys)]
    words = np.stack([spec.mask_permute(np.full(steps, i, dtype=np.uint64), [c.astype(np.uint64) for c in columns])
                      for i in range(positions // 2)])
    level = spec.keep_level(rate)
    dropped = np.concatenate([~spec.keep(words, False, level), ~spec.keep(words, True, level)])
    rates = dropped.mean(axis=1)
    z = (rates - rate) / np.sqrt(rate * (1 - rate) / steps)
    assert len(z) == positions
    assert np.abs(z).max() < 5, f"position {int(np.abs(z).argmax())} drops at {rates[np.abs(z).argmax()]:.4f}"


def test_no_mirrored_pairs_in_a_call():
    """Elements i and K - i of one call never share their bits (the old round h (h - a) made every
    such pair equal for K = a / C)."""
    count = 2 ** 20
    bits = counter_bits((count,), KEYS).numpy()
    checked = 0
    for mirror in (count - 1, count // 2, 12345):
        i = np.arange(1, mirror // 2)
        assert np.count_nonzero(bits[i] == bits[mirror - i]) == 0
        checked += 1
    assert checked == 3


def test_a_mask_keeps_at_its_rate_and_its_neighbours_are_independent():
    mask = keep_mask((1000, 1000), 0.1, KEYS).numpy()
    z = (1 - mask.mean() - 0.1) / np.sqrt(0.09 / mask.size)
    assert abs(z) < 5
    for a, b in ((mask[:, 1:], mask[:, :-1]), (mask[1:], mask[:-1])):
        corr = np.corrcoef(a.ravel().astype(float), b.ravel().astype(float))[0, 1] * np.sqrt(a.size)
        assert abs(corr) < 5


# ---- dropout masks: two 16-bit elements per word ---------------------------------------------------

def spec_mask(shape, rate, keys=KEYS, rows=None):
    """``counter_spec.keep`` for every element of a whole mask of ``shape`` (``rows``: a
    ``(micro_batches, micro)`` step layout of dim 0, as ``StepRows``)."""
    shape = tuple(shape)
    n_rows, columns = spec.mask_columns(shape)
    row = np.arange(n_rows, dtype=np.uint64)
    if rows is not None:
        micro_batches, micro = rows
        per_row = n_rows // shape[0]
        position = micro * shape[0] + np.arange(shape[0])
        row = (position[:, None] * per_row + np.arange(per_row)[None, :]).ravel().astype(np.uint64)
    column = np.arange(columns, dtype=np.uint64)
    word, low = spec.mask_word(row[:, None], column[None, :], columns)
    unsigned = [np.uint64(k & spec.MASK32) for k in keys]
    flat = word.reshape(-1)
    bits = spec.mask_permute(flat & np.uint64(spec.MASK32), unsigned, flat >> np.uint64(32)).reshape(word.shape)
    return spec.keep(bits, np.broadcast_to(low, bits.shape), spec.keep_level(rate)).reshape(shape)


# (keys, shape, rate, kept elements in C order as a bit string): pinned from counter_spec; the
# first is worked by hand in test_mask_known_answers.
MASK_KNOWN_ANSWERS = [
    ((1, 0, 1, 1, 1), (2, 3), 0.5, "101001"),
    ((0x9E3779B1, 0x7F4A7C15, 0x85EBCA6B, 0xC2B2AE35, 0x27D4EB2F), (3, 5), 0.3, "100101011111110"),
]


@pytest.mark.parametrize("keys, shape, rate, expected", MASK_KNOWN_ANSWERS)
def test_mask_known_answers(keys, shape, rate, expected):
    """Row r of N columns reads words r * W ... r * W + W - 1 (W = ceil(N/2)): column c < W the high
    half of word c, column c >= W the low half of word c - W.  By hand for keys (1, 0, 1, 1, 1), 2 x 3
    at p = 0.5 (kept where the half's top bit is 0): the words of indices 0-3 are 0, 0xFFFD0000,
    0xFFF60000, 0xFFEB0000 (``mask_permute``; no negative word that is not a multiple of 2**16 meets
    ``rotate_trunc`` on the way, so they are ``permute``'s, worked in test_known_answers); row 0 reads the high halves of
    words 0 and 1 (kept, dropped) and the low half of word 0 (kept); row 1 the high halves of words 2
    and 3 (dropped, dropped) and the low half of word 2 (kept): 101001."""
    got = "".join("1" if k else "0" for k in spec_mask(shape, rate, keys).ravel())
    assert got == expected
    signed = tuple(spec.to_signed(k) for k in keys)
    assert "".join("1" if k else "0" for k in keep_mask(shape, rate, signed).numpy().ravel()) == expected


MASK_BOXES = [
    ((7,), (0,), (7,)), ((7,), (2,), (5,)), ((), (), ()), ((64, 12), (1, 3), (3, 4)), ((64, 13), (0, 3), (64, 12)),
    ((64, 13), (5, 0), (9, 13)), ((4, 5, 6, 7), (1, 0, 2, 1), (3, 5, 3, 6)), ((4, 5, 6, 7), (0, 2, 0, 0), (4, 3, 6, 7)),
    ((9, 1), (2, 0), (7, 1)), ((3, 2 ** 12 + 1), (1, 1), (3, 2 ** 12 + 1)),
]


def _three_paths(monkeypatch, shape, lo, hi, rate, rows=None, chunk=None):
    """A mask box from the host loop, from the int32 ops (as on a GPU), and from the int32 ops hashed in
    chunks of ``chunk`` words."""
    from libai_ext.random import counter_rng

    kernel()
    host = local_keep_mask(shape, lo, hi, KEYS, rate, "cpu", rows).numpy()
    with monkeypatch.context() as patch:
        patch.setattr(counter_rng, "_counter_kernel", None)
        ops = local_keep_mask(shape, lo, hi, KEYS, rate, "cpu", rows).numpy()
        patch.setattr(counter_rng, "CHUNK_WORDS", {"cpu": chunk or 3})
        chunked = local_keep_mask(shape, lo, hi, KEYS, rate, "cpu", rows).numpy()
    return host, ops, chunked


@pytest.mark.parametrize("shape, lo, hi", MASK_BOXES)
def test_mask_boxes_are_the_specifications_on_both_paths(monkeypatch, shape, lo, hi):
    """The host loop (eager CPU ranks) and the int32 ops (graphs, GPUs), whole and in chunks, give the
    specification's bits for any box: odd columns, odd cuts, 1-D (one column) and 0-d masks."""
    expected = spec_mask(shape, 0.3)[tuple(slice(a, b) for a, b in zip(lo, hi))]
    host, ops, chunked = _three_paths(monkeypatch, shape, lo, hi, 0.3)
    for name, got in (("host loop", host), ("int32 ops", ops), ("int32 ops in chunks", chunked)):
        assert got.dtype == np.bool_ and got.shape == expected.shape, name
        np.testing.assert_array_equal(got, expected, err_msg=name)
    assert 0 < expected.sum() < expected.size or expected.size < 3


@pytest.mark.parametrize("rows, dim0", [((2, 1), 4), ((3, 2), 2), ((4, 0), 4)])
def test_mask_rows_of_a_micro_batch_are_the_steps_on_both_paths(monkeypatch, rows, dim0):
    """Under gradient accumulation a micro-batch's rows are numbered by their place in the step."""
    micro_batches, micro = rows
    shape = (dim0, 3, 5)
    step = spec_mask(shape, 0.4, rows=rows)
    checked = 0
    for lo, hi in (((0, 0, 0), shape), ((dim0 // 2, 1, 0), (dim0, 3, 5)), ((0, 0, 1), (dim0, 3, 4))):
        expected = step[tuple(slice(a, b) for a, b in zip(lo, hi))]
        for got in _three_paths(monkeypatch, shape, lo, hi, 0.4, StepRows(*rows), chunk=4):
            np.testing.assert_array_equal(got, expected)
            checked += 1
    traced = keep_mask(shape, 0.4, KEYS, rows=StepRows(micro_batches, flow.tensor([micro], dtype=flow.int32)))
    np.testing.assert_array_equal(traced.numpy(), step)
    assert checked == 9


@pytest.mark.parametrize("shape", [(64, 12), (5, 7, 3), (11,)])
def test_whole_masks_from_global_ops_are_the_specifications(shape):
    """What a graph traces (global ops on the whole tensor) draws the eager masks."""
    placement = flow.placement("cpu", ranks=[0])
    got = keep_mask(shape, 0.3, KEYS, placement, [flow.sbp.broadcast]).to_local().numpy()
    np.testing.assert_array_equal(got, spec_mask(shape, 0.3))
    np.testing.assert_array_equal(keep_mask(shape, 0.3, KEYS).numpy(), spec_mask(shape, 0.3))


def test_mask_rates_are_multiples_of_two_to_the_minus_16():
    """p is rounded to a multiple of 2**-16: exact over the 2**16 values of a half; 1 drops all, 0 none."""
    values = np.arange(2 ** 16, dtype=np.uint64)
    words = values << np.uint64(16)  # every high half once
    checked = 0
    for rate in (0.1, 0.5, 1e-6, 2 ** -16, 0.999999, 1.0, 0.0):
        level = spec.keep_level(rate)
        dropped = int(np.count_nonzero(~spec.keep(words, False, level)))
        assert dropped == level == round(rate * 2 ** 16), rate
        checked += 1
    assert checked == 7
    assert not keep_mask((4, 6), 1.0, KEYS).numpy().any() and keep_mask((4, 6), 0.0, KEYS).numpy().all()


def test_the_two_halves_of_a_word_are_independent():
    """Columns 2k and 2k+1 read one word: over 2**22 words, P(both dropped) = p**2 within 5 sigma
    at p = 0.5 and 0.1, and the halves are uncorrelated."""
    words = spec_bits(np.arange(2 ** 22, dtype=np.uint64), permutation=spec.mask_permute).astype(np.int64) % 2 ** 32
    words = words.astype(np.uint64)
    checked = 0
    for rate in (0.5, 0.1):
        level = spec.keep_level(rate)
        high, low = ~spec.keep(words, False, level), ~spec.keep(words, True, level)
        both = np.mean(high & low)
        p2 = (level / 2 ** 16) ** 2
        assert abs(both - p2) / np.sqrt(p2 * (1 - p2) / words.size) < 5, (rate, both, p2)
        corr = np.corrcoef(high, low)[0, 1] * np.sqrt(words.size)
        assert abs(corr) < 5, (rate, corr)
        checked += 1
    assert checked == 2


# ---- the host kernel (eager CPU masks) ---------------------------------------------------------------

def kernel():
    from libai_ext.random import counter_rng

    assert counter_rng._counter_kernel is not None, "the host kernel was not built (pip install -e . builds it)"
    return counter_rng._counter_kernel


@pytest.mark.parametrize("shape, lo, hi", [
    ((7,), (0,), (7,)), ((64, 12), (1, 3), (3, 4)), ((4, 5, 6, 7), (1, 0, 2, 0), (3, 5, 3, 7)),
    ((2 ** 20, 2 ** 13), (2 ** 20 - 3, 5), (2 ** 20, 9)),
])
def test_the_host_kernel_computes_the_specifications_bits(shape, lo, hi):
    from libai_ext.random.global_index import slice_terms

    out = np.empty([b - a for a, b in zip(lo, hi)], dtype=np.int32)
    kernel().bits(out, slice_terms(shape, lo, hi), [k & spec.MASK32 for k in KEYS])
    if np.prod(shape) < 2 ** 32:
        expected = spec_bits(box_indices(shape, lo, hi))
    else:
        rows = np.arange(lo[0], hi[0], dtype=np.uint64)[:, None] * np.uint64(shape[1])
        expected = spec_bits(rows + np.arange(lo[1], hi[1], dtype=np.uint64)[None, :])
    np.testing.assert_array_equal(out, expected)


def test_masks_past_two_to_the_32_words_match_the_specification(monkeypatch):
    """A global mask of 2**34 elements (2**33 words; its shards small): the word's high index counts,
    on both paths."""
    shape, lo, hi = (2 ** 21, 2 ** 13), (2 ** 21 - 2, 6), (2 ** 21, 11)
    row = np.arange(lo[0], hi[0], dtype=np.uint64)[:, None]
    column = np.arange(lo[1], hi[1], dtype=np.uint64)[None, :]
    word, low = spec.mask_word(row, column, shape[1])
    bits = (spec_bits(word, permutation=spec.mask_permute).astype(np.int64) % 2 ** 32).astype(np.uint64)
    expected = spec.keep(bits, np.broadcast_to(low, bits.shape), spec.keep_level(0.5))
    for got in _three_paths(monkeypatch, shape, lo, hi, 0.5):
        np.testing.assert_array_equal(got, expected)
    low_only = spec_bits(word & np.uint64(spec.MASK32), permutation=spec.mask_permute).astype(np.int64) % 2 ** 32
    assert not np.array_equal(bits, low_only), "the high word changed nothing"


def test_the_host_kernel_refuses_bad_buffers():
    terms = [np.arange(2, dtype=np.int64), np.arange(3, dtype=np.int64)]
    with pytest.raises(ValueError, match="1-byte buffer of 6 elements"):
        kernel().keep_mask(np.empty(5, np.bool_), terms, [1, 0, 1, 1, 1], 0, 3)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        kernel().keep_mask(np.empty(6, np.bool_), [np.arange(6, dtype=np.int64)], [1, 0, 1, 1, 1], 0, 6)
    with pytest.raises(ValueError, match=r"columns must lie in \[0, 2\)"):
        kernel().keep_mask(np.empty(6, np.bool_), terms, [1, 0, 1, 1, 1], 0, 2)
    with pytest.raises(TypeError, match="int64"):
        kernel().bits(np.empty(6, np.int32), [np.arange(6, dtype=np.int32)], [1, 0, 1, 1, 1])
    with pytest.raises(ValueError, match=r"\(C, a, d1, d2, d3\)"):
        kernel().bits(np.empty(6, np.int32), [np.arange(6, dtype=np.int64)], [1, 0, 1])


@pytest.mark.parametrize("lo, hi, chunk, crosses", [((524222, 0), (524226, 16385), 8193, True),
                                                    ((524223, 7), (524225, 9000), 3000, True),
                                                    ((10 ** 6, 1), (10 ** 6 + 2, 40), None, False)])
def test_masks_past_two_to_the_32_words_in_chunks(monkeypatch, lo, hi, chunk, crosses):
    """A mask of 2**20 rows of 8,193 words (past 2 * 2**32 words): a chunk wholly on one side of a multiple of
    2**32 takes its high word as a constant, one across it per element; every path gives the spec's bits."""
    from libai_ext.random import counter_rng

    shape = (2 ** 20, 2 ** 14 + 1)
    word, low = spec.mask_word(np.arange(lo[0], hi[0], dtype=np.uint64)[:, None],
                               np.arange(lo[1], hi[1], dtype=np.uint64)[None, :], shape[1])
    high = word >> np.uint64(32)
    assert (high.min() != high.max()) == crosses and high.max() >= 1
    unsigned = [np.uint64(k & spec.MASK32) for k in KEYS]
    expected = spec.keep(spec.mask_permute(word & np.uint64(spec.MASK32), unsigned, high),
                         np.broadcast_to(low, word.shape), spec.keep_level(0.3))
    shared = []
    real = counter_rng._shared_high_word
    monkeypatch.setattr(counter_rng, "_shared_high_word", lambda *a: shared.append(real(*a)) or shared[-1])
    for name, got in zip(("host loop", "int32 ops", "int32 ops in chunks"),
                         _three_paths(monkeypatch, shape, lo, hi, 0.3, chunk=chunk)):
        np.testing.assert_array_equal(got, expected, err_msg=name)
    assert (None in shared) == crosses and any(h for h in shared if h is not None)


@pytest.mark.parametrize("device", ["cuda", "cuda:1", flow.device("cuda")])
def test_a_gpu_ranks_chunks_are_few_and_within_the_memory_bound(device):
    """The sizes a GPU device gets, computed without a GPU: GPT-3 175B's attention-probability mask on a rank of
    (32, 8, 4) (12 samples x 12 heads x 2,048 rows of 1,024 words) is a few chunks of the int-op path, each within
    ``GPU_LAUNCH_BYTES`` of temporaries, and a few apply launches; a CPU keeps its own sizes."""
    from libai_ext.random import counter_rng
    from libai_ext.random.layers import stochastic

    assert not counter_rng.host_kernel_serves(device)
    limit = counter_rng.chunk_words(device)
    assert limit * counter_rng.CHUNK_BYTES_PER_WORD <= counter_rng.GPU_LAUNCH_BYTES
    chunks = counter_rng.mask_chunks((0, 0, 0), (12, 12, 2048), (0, 1024), limit)
    sizes = [int(np.prod(np.subtract(c.row_hi, c.row_lo))) * (c.stop - c.first) for c in chunks]
    assert sum(sizes) == 12 * 12 * 2048 * 1024 and max(sizes) <= limit and len(chunks) <= 12
    assert len(stochastic.apply_chunks(12 * 12 * 2048 * 2048, stochastic.APPLY_CHUNK["cuda"])) <= 9
    assert counter_rng.chunk_words("cpu") == 2 ** 17 and len(counter_rng.mask_chunks(
        (0, 0, 0), (12, 12, 2048), (0, 1024), counter_rng.chunk_words("cpu"))) == 2304


def _around_multiples_of_two_to_the_32(shape):
    """Per dim, positions that put the flat index on both sides of each multiple of 2**32 it crosses, and ends."""
    strides = [int(np.prod(shape[d + 1:], dtype=np.int64)) for d in range(len(shape))]
    picks = [{0, n - 1} for n in shape]
    for multiple in range(2 ** 32, int(np.prod(shape, dtype=np.int64)), 2 ** 32):
        for flat in (multiple - 1, multiple):
            for d, stride in enumerate(strides):
                picks[d].add(flat // stride % shape[d])
    return strides, [sorted(p) for p in picks]


@pytest.mark.parametrize("shape", [(2 ** 20, 2 ** 14 + 1), (3, 5 * 2 ** 29 + 1, 3), (2 ** 33 + 5,)])
def test_high_words_from_int_ops_only(monkeypatch, shape):
    """``flat // 2**32`` of the index (what the graph path and a chunk across a multiple of 2**32 compute per
    element), on both sides of every multiple of 2**32: the rest's carry into the high word (mid-row), outer
    dims past 2**31 positions, a dimension too large for any rest (int64 throughout); no float64 on the way."""
    from libai_ext.random import global_index

    strides, picks = _around_multiples_of_two_to_the_32(shape)
    vectors = [([d], flow.tensor(p, dtype=flow.int64 if shape[d] >= 2 ** 31 else flow.int32), 0)
               for d, p in enumerate(picks)]
    casts = []
    real_to = flow.Tensor.to
    monkeypatch.setattr(flow.Tensor, "to", lambda self, *a, **k: casts.append(a) or real_to(self, *a, **k))
    high = global_index._high_words(vectors, strides, shape)
    monkeypatch.undo()
    if isinstance(high, global_index.HighWords):
        high = flow.where(high.carry, high.high + 1, high.high)
    flat = sum(np.array(p, dtype=np.int64).reshape([-1 if e == d else 1 for e in range(len(shape))]) * s
               for d, (p, s) in enumerate(zip(picks, strides)))
    np.testing.assert_array_equal(high.numpy(), flat >> 32)
    assert len(np.unique(flat >> 32)) > 1 and flow.float64 not in [a for cast in casts for a in cast]
