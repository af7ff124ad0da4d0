"""Counter-based random bits keyed by each element's *global* position ("layout_invariant").

An element's 32 bits depend only on the draw's keys and its flat index in the global tensor, never on the rank:
replicas (``B``, and ``P`` read as ``B``) compute identical bits with no communication, shards (``S``) their slices
of one global draw, the same for any placement. The bits are ``counter_spec``'s keyed permutation (docs/randomness.md),
written with the int32 ops OneFlow 0.9.0 computes exactly on every device (measured on CPU): ``*`` and ``-``
(wrapping), ``+`` and ``-`` of a Python int, comparisons, casts. ``+`` of two int32 tensors and unary ``-`` round
through float32, so they are never used; there are no bitwise ops; ``//`` truncates toward zero, so ``rotate_mix``
corrects it to the floor with one comparison.

Dropout masks (``keep_mask``, ``local_keep_mask``) read two 16-bit elements per word of ``counter_spec.mask_permute``
into a 1-byte mask: eager ranks hash their slice with local ops in row chunks (``CHUNK_WORDS``), CPU ranks in one host
loop, ``nn.Graph`` traces global ops (``counter_bits`` with a placement). Under gradient accumulation a micro-batch's
rows are numbered by their place in the step's global batch (``global_index.StepRows``).

Keys, all from ``draws.key``: ``derive_keys`` for one-off draws (initial weights), ``call_keys`` for a layer's draw
``(step, call)`` from the step's key (host ints for eager layers, an input tensor inside a graph: the same bits).
"""
import functools
from typing import NamedTuple

import numpy as np
import oneflow as flow

from . import counter_spec, global_index
from .counter_spec import HI_MULTIPLIERS, KEY_WORDS, to_signed
from .global_index import StepRows
from .draws import key_words, step_key

try:  # built by `pip install` where a C compiler exists (setup.py); the int32 ops otherwise
    from . import _counter_kernel
except ImportError:
    _counter_kernel = None


def _hash_words(count, words):
    return [to_signed(w) for w in key_words(*words, count=count)]


def _odd_where_needed(keys):
    """``C`` and every ``d`` odd (``a`` is free)."""
    return tuple(k if i == 1 else k | 1 for i, k in enumerate(keys))


def derive_keys(*words):
    """``(C, a, d1, d2, d3)`` (signed int32) from any words (seed, stream, name, ...)."""
    return _odd_where_needed(_hash_words(KEY_WORDS, words))


@functools.lru_cache(maxsize=4096)
def stream_words(seed, stream):
    """A stream's words: for ``C`` and ``a``, a multiplier of the step key (odd), a call multiplier and an
    offset (both even for ``C``, which stays odd); then its rounds' keys ``d1, d2, d3`` (odd)."""
    linear = _hash_words(6, (seed, stream, "linear"))
    linear = tuple(w | 1 if i % 3 == 0 else (w & ~1 if i < 3 else w) for i, w in enumerate(linear))
    return linear, derive_keys(seed, stream, "rounds")[2:]


def call_keys(words, hashed, call=0):
    """The keys ``(C, a, d1, d2, d3)`` of a stream's draw ``(step, call)`` from the step's key ``hashed``
    (``step_key``): ``C`` and ``a`` are ``hash * multiplier - (call * call multiplier + offset)``, the ``d`` are
    the stream's own, so a draw costs two multiply-adds and the rounds take constants.  For a graph's key
    (int32 tensors of one element each) ``C`` and ``a`` are such tensors, the same bits."""
    (m_c, s_c, o_c, m_a, s_a, o_a), rounds = words
    h_c, h_a = hashed
    c, a = h_c * m_c - to_signed(s_c * call + o_c), h_a * m_a - to_signed(s_a * call + o_a)
    if isinstance(h_c, flow.Tensor):  # ``*`` and ``-`` of Python ints: exact, no constant tensors
        return (c, a) + rounds
    return (to_signed(c), to_signed(a)) + rounds


def stream_keys(seed, stream, step, call=0):
    """The keys of a stream's draw ``(step, call)`` on the host, as ints."""
    return call_keys(stream_words(seed, stream), step_key(seed, step), int(call))


# ---- the permutation on int32 tensors ------------------------------------------------------

def rotate_mix(x):
    """R on signed int32: ``x * 2**16 + floor(x / 2**16)`` (= ``counter_spec.rotate_mix``).

    OneFlow's ``//`` truncates: for negative ``x`` not a multiple of 2**16 (where ``x < q * 2**16``) the quotient is
    one above the floor; ``+`` of two int32 tensors is inexact, so the floor is subtracted as ``-(below - q)``."""
    quotient = x // 2 ** 16
    below = x < quotient * 2 ** 16
    return x * 2 ** 16 - (below - quotient)


def rotate_trunc(x):
    """The masks' R on signed int32: ``x * 2**16 + trunc(x / 2**16)`` (= ``counter_spec.rotate_trunc``):
    OneFlow's ``//`` truncates, and ``trunc(x / -2**16) = -trunc(x / 2**16)``, so three int32 ops."""
    return x * 2 ** 16 - x // -2 ** 16


def quadratic(x, d):
    """Q: ``x * (2x - d)`` (``d`` an odd int or an int32 tensor; ``tensor - tensor`` is exact)."""
    return x * (x * 2 - d)


def mix(x, keys, hi=None, rotate=rotate_mix):
    """The rounds after ``A``: ``x`` holds ``lo * C - a``; ``hi`` the index's high words, if any (a tensor, a
    ``global_index.HighWords``, or one int shared by every element: a constant per round); ``rotate``:
    ``rotate_mix`` (``permute``) or ``rotate_trunc`` (``mask_permute``)."""
    for d, multiplier in zip(keys[2:], HI_MULTIPLIERS):
        x = quadratic(rotate(x), d)
        if isinstance(hi, int):
            x = x - to_signed(hi * multiplier) if hi else x
        elif isinstance(hi, global_index.HighWords):
            x = x - hi.scaled(to_signed(multiplier))
        elif hi is not None:
            x = x - hi * to_signed(multiplier)
    return x


# ---- bits of whole tensors and of slices ----------------------------------------------------

def counter_bits(shape, keys, placement=None, sbp=None, device=None, rows=None, rotate=rotate_mix):
    """int32 random bits for a tensor of ``shape``: global with ``placement`` and ``sbp`` (global
    ops only: what ``nn.Graph`` traces), else local on ``device``.  ``rows``: a
    ``global_index.StepRows`` when dim 0 is a micro-batch of a larger step.  ``rotate_trunc`` gives
    a mask's words (``counter_spec.mask_permute``)."""
    x0, hi = global_index.keyed_index(tuple(int(s) for s in shape), keys, placement, sbp, device, rows)
    return mix(x0, keys, hi, rotate)


def local_counter_bits(shape, lo, hi, keys, device=None, rows=None, rotate=rotate_mix):
    """``counter_bits`` of the slice ``[lo, hi)`` of a global tensor of ``shape``, from local ops
    (cheaper to launch than global ones), as a local tensor on ``device``."""
    x0, high = global_index.keyed_slice(shape, lo, hi, keys, device, rows)
    return mix(x0, keys, high, rotate)


# ---- dropout masks: two elements from each word (counter_spec.keep) ---------------------------------

# Temporaries one eager launch on a GPU may hold (the mask's chunks here, the apply step's in ``layers.stochastic``):
# 1 GiB, 1.25 % of an 80 GB H100, beside a GPT-3 175B rank's weights, optimizer state and activations at (32, 8, 4)
# (5.5 billion parameters); large enough that a rank's eager step issues a few launches per mask, not hundreds.
GPU_LAUNCH_BYTES = 2 ** 30
# Bytes per word live at a chunk's peak: five int32 tensors of its words (a round of ``mix``: its input, the two
# operands of its last op and their result; the chunk's first words, which the caller holds) and, in a chunk across
# a multiple of 2**32, its carry.  Measured on CPU (``benchmarks/mask_cost.py --chunk-peak``): 22-24 bytes per
# word, its 2-byte output included.
CHUNK_BYTES_PER_WORD = 24
# Words hashed per launch by the eager int-op path: bounds its temporaries whatever the mask's size.  Each chunk
# is 32-35 OneFlow ops (benchmarks/mask_count.py) and an eager op costs tens of microseconds of CPU beyond its
# kernel (Python dispatch, OneFlow's scheduler).  On CPU (where the host loop serves when built), 2**17 words
# measured best: 2**16 doubles the ops, 2**18 raises the peak at 2**24 elements by a quarter
# (benchmarks/mask_cost.py); on GPUs, ``GPU_LAUNCH_BYTES``.
CHUNK_WORDS = {"cpu": 2 ** 17, "cuda": GPU_LAUNCH_BYTES // CHUNK_BYTES_PER_WORD}


def host_kernel_serves(device):
    """Whether ``local_keep_mask`` runs the fused host loop here: a CPU tensor, the compiled kernel present."""
    return _counter_kernel is not None and _device_type(device) == "cpu"


def _device_type(device):
    return (device if isinstance(device, str) else device.type).split(":")[0]


def keep_level(rate):
    """``counter_spec.keep_level``: P(drop) = level / 2**16."""
    return counter_spec.keep_level(rate)


def _word_threshold(level):
    """Signed int32 ``t``: a word's high half keeps where ``word >= t``, its low half where
    ``word * 2**16 >= t`` (level < 2**16)."""
    return (level - counter_spec.HALF // 2) * counter_spec.HALF


def _as_matrix(shape, lo=None, hi=None):
    """A mask's shape as ``(leading dims..., columns)`` (``counter_spec.mask_columns``), its box the
    same way, and whether a column was added (1-D and 0-d masks)."""
    shape = tuple(int(s) for s in shape)
    lo = [int(v) for v in lo] if lo is not None else [0] * len(shape)
    hi = [int(v) for v in hi] if hi is not None else list(shape)
    if len(shape) >= 2:
        return shape, lo, hi, False
    if not shape:
        return (1, 1), [0, 0], [1, 1], True
    return (shape[0], 1), lo + [0], hi + [1], True


def _column_halves(columns, start, stop):
    """For the columns ``[start, stop)`` of a row of ``columns``: the words their high halves read
    ``(first, last + 1)``, the words their low halves read, and the words to hash (both, as one range)."""
    words = (columns + 1) // 2
    high = (start, min(stop, words))
    low = (max(start, words) - words, stop - words)
    ranges = [r for r in (high, low) if r[0] < r[1]]
    hashed = (min(r[0] for r in ranges), max(r[1] for r in ranges)) if ranges else (0, 0)
    return high, low, hashed


def _keep_halves(bits, level, high, low, first):
    """The keep decisions of a row block from the bits of its words ``[first, ...)``: the high halves
    of words ``high``, then the low halves of words ``low`` (column order)."""
    threshold = _word_threshold(level)

    def words(start, stop):  # (no slice op where all of them)
        whole = start == first and stop - first == bits.shape[-1]
        return bits if whole else bits[..., start - first:stop - first]

    parts = []
    if high[0] < high[1]:
        parts.append(words(*high) >= threshold)
    if low[0] < low[1]:
        parts.append(words(*low) * counter_spec.HALF >= threshold)
    return parts


def _row_chunks(lo, hi, words, limit):
    """The leading dims of the box ``[lo, hi)`` cut into boxes of at most ``limit // words`` rows (at least
    one row) along the first dimension that holds more than one position: ``[(lo, hi)]``."""
    sizes = [b - a for a, b in zip(lo, hi)]
    total = int(np.prod(sizes, dtype=np.int64)) * words
    if total <= limit or not any(s > 1 for s in sizes):
        return [(list(lo), list(hi))]
    dim = next(d for d, size in enumerate(sizes) if size > 1)
    step = max(1, limit // (total // sizes[dim]))
    boxes = []
    for start in range(lo[dim], hi[dim], step):
        a, b = list(lo), list(hi)
        a[dim], b[dim] = start, min(start + step, hi[dim])
        boxes += _row_chunks(a, b, words, limit)
    return boxes


def local_keep_mask(shape, lo, hi, keys, rate, device=None, rows=None):
    """The slice ``[lo, hi)`` of a global tensor's dropout mask (``counter_spec.keep``), as a local
    bool tensor on ``device``: one host loop on CPU, int32 ops elsewhere, the same bits."""
    device = device or "cpu"
    level, out_shape, matrix, lo, hi, terms, box_shape = _mask_plan(
        tuple(shape), tuple(lo), tuple(hi), rate, *((1, 0) if rows is None else (rows.micro_batches, int(rows.micro))))
    if terms is None:  # all dropped, or an empty slice
        return flow.zeros(out_shape, dtype=flow.bool, device=device)
    if _counter_kernel is not None and str(device).startswith("cpu"):  # (``host_kernel_serves``, inlined)
        values = np.empty(box_shape, dtype=np.bool_)
        _counter_kernel.keep_mask(values, terms, keys, level, matrix[-1])
        return flow.from_numpy(values.reshape(out_shape))  # shares the array's memory: no copy
    return _keep_from_int_ops(matrix, lo, hi, keys, level, device, rows).reshape(out_shape)


@functools.lru_cache(maxsize=1024)
def _mask_plan(shape, lo, hi, rate, micro_batches, micro):
    """``(keep level, slice shape, matrix, its box lo, hi, host kernel terms or None where nothing is hashed,
    box shape)`` of ``local_keep_mask``'s slice (cached: a model's masks repeat their shapes every step)."""
    level = keep_level(rate)
    out_shape = tuple(int(b) - int(a) for a, b in zip(lo, hi))
    matrix, lo, hi, _ = _as_matrix(shape, lo, hi)
    box_shape = tuple(b - a for a, b in zip(lo, hi))
    if level >= counter_spec.HALF or 0 in box_shape:
        return level, out_shape, matrix, lo, hi, None, box_shape
    rows = StepRows(micro_batches, micro) if micro_batches > 1 else None
    return level, out_shape, matrix, lo, hi, global_index.mask_terms(matrix, lo, hi, rows), box_shape


def _keep_from_int_ops(matrix, lo, hi, keys, level, device, rows):
    """``local_keep_mask``'s box from int32 ops, hashed in chunks (``mask_chunks``) into one bool tensor."""
    high, low, hashed = _column_halves(matrix[-1], lo[-1], hi[-1])
    words = matrix[:-1] + ((matrix[-1] + 1) // 2,)
    keep = flow.empty([b - a for a, b in zip(lo, hi)], dtype=flow.bool, device=device)
    for chunk in mask_chunks(lo[:-1], hi[:-1], hashed, chunk_words(device)):
        part_high = (max(high[0], chunk.first), min(high[1], chunk.stop))
        part_low = (max(low[0], chunk.first), min(low[1], chunk.stop))
        columns = _columns_of(part_high, part_low, high, low, lo[-1], matrix[-1])
        bits = _chunk_words(words, list(chunk.row_lo) + [chunk.first], list(chunk.row_hi) + [chunk.stop],
                            keys, device, rows)
        rows_slice = tuple(slice(at - o, at - o + b - a)
                           for a, b, at, o in zip(chunk.row_lo, chunk.row_hi, chunk.at, lo[:-1]))
        for (a, b), part in zip(columns, _keep_halves(bits, level, part_high, part_low, chunk.first)):
            keep[rows_slice + (slice(a, b),)] = part
    return keep


def _chunk_words(words, lo, hi, keys, device, rows):
    """A chunk's words (``counter_spec.mask_permute``): where they share one high word (every chunk but one
    that crosses a multiple of 2**32), that word is a constant of the rounds (none below 2**32): no per-element
    high words, no float64 temporaries."""
    high = _shared_high_word(words, lo, hi, rows)
    if high is None:
        return local_counter_bits(words, lo, hi, keys, device, rows, rotate_trunc)
    x0, _ = global_index.keyed_slice(words, lo, hi, keys, device, rows, high_words=False)
    return mix(x0, keys, high, rotate_trunc)


def _shared_high_word(shape, lo, hi, rows):
    """``flat // 2**32`` of the box ``[lo, hi)`` of ``shape`` (dim 0 a micro-batch of ``rows``) where its
    first and last elements share it (the flat index grows through the box), else None."""
    virtual = (shape[0] * rows.micro_batches,) + tuple(shape[1:]) if rows is not None else tuple(shape)
    offset = rows.offset(shape[0]) if rows is not None else 0
    strides = [int(np.prod(virtual[d + 1:], dtype=np.int64)) for d in range(len(virtual))]
    first = sum((a + (offset if d == 0 else 0)) * s for d, (a, s) in enumerate(zip(lo, strides)))
    last = sum((b - 1 + (offset if d == 0 else 0)) * s for d, (b, s) in enumerate(zip(hi, strides)))
    return first >> 32 if first >> 32 == last >> 32 else None


class MaskChunk(NamedTuple):
    """One launch of the int-op path: the rows ``[row_lo, row_hi)`` (global, leading dims) and the words
    ``[first, stop)`` it hashes, written at the rows starting at ``at`` (``row_lo`` unless a fault is injected)."""
    row_lo: tuple
    row_hi: tuple
    first: int
    stop: int
    at: tuple


def mask_chunks(lo, hi, hashed, limit):
    """The int-op path's chunks of the box ``[lo, hi)`` (leading dims) whose rows hash the words ``hashed``:
    at most ``limit`` words each (``MaskChunk``), together every position of the box once."""
    return [MaskChunk(tuple(row_lo), tuple(row_hi), first, stop, tuple(row_lo))
            for first, stop in _word_ranges(hashed, limit)  # one row can hold more words than a chunk
            for row_lo, row_hi in _row_chunks(lo, hi, stop - first, limit)]


def chunk_words(device):
    """``CHUNK_WORDS`` of ``device``'s type (the largest for a type it does not name)."""
    return CHUNK_WORDS.get(_device_type(device)) or max(CHUNK_WORDS.values())


def _word_ranges(hashed, limit):
    """``hashed`` cut into ranges of at most ``limit`` words."""
    return [(a, min(a + limit, hashed[1])) for a in range(hashed[0], hashed[1], limit)] or [hashed]


def _columns_of(part_high, part_low, high, low, first_column, columns):
    """Local column ranges (in the box, which starts at ``first_column``) that the non-empty halves
    ``part_high``, ``part_low`` (of the box's ``high``, ``low`` word ranges) write."""
    words = (columns + 1) // 2
    out = []
    if part_high[0] < part_high[1]:
        out.append((part_high[0] - first_column, part_high[1] - first_column))
    if part_low[0] < part_low[1]:
        out.append((part_low[0] + words - first_column, part_low[1] + words - first_column))
    return out


def keep_mask(shape, rate, keys, placement=None, sbp=None, device=None, rows=None):
    """bool tensor of ``shape``: True (keep) with probability ``1 - rate`` (``counter_spec.keep``),
    keyed by global position; global with ``placement``/``sbp`` (global ops: what a graph traces)."""
    level = keep_level(rate)
    layout = dict(placement=placement, sbp=sbp) if placement is not None else dict(device=device)
    if level >= counter_spec.HALF:
        return flow.zeros(tuple(shape), dtype=flow.bool, **layout)
    matrix, _, _, column_added = _as_matrix(shape)
    words = matrix[:-1] + ((matrix[-1] + 1) // 2,)
    high, low, _ = _column_halves(matrix[-1], 0, matrix[-1])
    # A row's two halves are two blocks of its columns: where the columns are split over ranks, each
    # rank hashes its rows' words whole and keeps its own columns (no communication either way).
    columns_split = placement is not None and not column_added and flow.sbp.split(len(shape) - 1) in sbp
    word_sbp = [flow.sbp.broadcast if s == flow.sbp.split(len(shape) - 1) else s for s in sbp] \
        if columns_split else sbp
    bits = counter_bits(words, keys, placement, word_sbp, device, rows, rotate_trunc)
    parts = _keep_halves(bits, level, high, low, 0)
    keep = parts[0] if len(parts) == 1 else flow.cat(parts, dim=-1)
    if columns_split:
        keep = keep.to_global(placement=placement, sbp=sbp)
    return keep.reshape(tuple(shape)) if column_added else keep


def unit_closed_open(bits):
    """32-bit words as float64 in [0, 1) (``rand``'s interval), 2**-32 apart."""
    return (bits.to(flow.float64) + 2.0 ** 31) * 2.0 ** -32


def unit_open(bits):
    """32-bit words as float64 in the open interval (0, 1) (logarithms stay finite)."""
    return (bits.to(flow.float64) + (2.0 ** 31 + 0.5)) * 2.0 ** -32


def counter_uniform(shape, keys, placement=None, sbp=None, device=None):
    """Uniform float32 values in [0, 1), keyed by global position like ``counter_bits``."""
    unit = unit_closed_open(counter_bits(shape, keys, placement, sbp, device))
    return flow.clamp(unit, max=1.0 - 2.0 ** -24).to(flow.float32)


def counter_unit(shape, keys, placement=None, sbp=None, device=None):
    """float64 uniform values in the open interval (0, 1) from all 32 bits (initial weights:
    no 2**-24 floor, so a normal's tail reaches 6.6 sigma instead of 5.8)."""
    return unit_open(counter_bits(shape, keys, placement, sbp, device))


def counter_normal(shape, keys_pair, placement=None, sbp=None, device=None):
    """float64 standard normal values (Box-Muller on two streams), keyed by global position."""
    u1 = counter_unit(shape, keys_pair[0], placement, sbp, device)
    u2 = counter_unit(shape, keys_pair[1], placement, sbp, device)
    return flow.sqrt(flow.log(u1) * -2.0) * flow.cos(u2 * (2.0 * np.pi))
