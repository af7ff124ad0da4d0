"""The counter-based permutation of ``counter_rng``, written with bit operations (the specification).

``counter_rng`` computes it with the int32 tensor ops OneFlow 0.9.0 has (no bitwise ops, no
shifts); this module states the same function on unsigned 32-bit words, the way a reader checks
it, and serves as the host's implementation (the keys of each call are hashed here: a handful
of Python ints, cheaper than any device op).  ``tests/test_counter_rng.py`` checks that both
give the same bits, and keeps known-answer vectors of this one.

For keys ``(C, a, d1, d2, d3)`` (``C`` and every ``d`` odd) and a 64-bit index ``i``, with
``lo = i mod 2**32`` and ``hi = i // 2**32``:

    x = lo * C - a                              A: an odd multiplier and an offset
    for j in 1, 2, 3:
        x = rotl16(x) - 2**16 * msb(x)          R: the high half moves down
        x = x * (2 * x - d_j)                   Q: a quadratic permutation (RC6's x(2x+1), keyed)
        x = x - hi * HI_MULTIPLIERS[j - 1]      (only where hi > 0)

all modulo 2**32.  Each step is a bijection of the 32-bit words:

* A: ``C`` is odd, so it is invertible modulo 2**32;
* R: the rotation by 16 is, and subtracting 2**16 * msb afterwards is undone by reading the
  msb back from the low half (it is the old top bit, now bit 15);
* Q: a polynomial ``a0 + a1 x + a2 x**2 + ...`` permutes the integers modulo 2**w iff ``a1`` is
  odd, ``a2 + a4 + ...`` is even and ``a3 + a5 + ...`` is even (Rivest, "Permutation polynomials
  modulo 2**w", 2001).  ``2x**2 - d x`` has ``a1 = -d`` odd and ``a2 = 2``: a permutation.  The
  unkeyed ``x (x - a)`` (``a2 = 1``) is not: it maps ``x`` and ``a - x`` to one value.

So for each key and each ``hi`` the map of ``lo`` is a permutation: within one call no two
elements of a tensor under 2**32 elements share their bits, and index 0 goes wherever ``-a``
leads, like any other.  ``R`` is what a T-function (every ``*``, ``-`` above) lacks: the low bits
of a product depend on the low bits of its factors only; three rounds of ``R`` and ``Q`` pass the
battery in ``tests/test_counter_rng.py`` on consecutive and strided indices alike.

Dropout masks read their words from ``mask_permute``: the same steps with ``R`` replaced by
``rotate_trunc`` (``x * 2**16 + trunc(x / 2**16)`` on the signed word): what OneFlow's int32 ``//``
computes in one op, where the floor ``R`` needs costs four more.  It is no bijection (the words of
``x`` and ``x - 2**16``, for ``0 < x < 2**16`` with the same low half, meet: 2**16 - 1 pairs of 2**32
per round), which a mask never needs; the battery of ``tests/test_counter_rng.py`` holds for it.

Dropout masks take 16 bits per element, two elements from each word (``keep``): a mask is read
as a matrix whose rows are its last dimension (a 1-D mask as one column, a 0-d one as ``1 x 1``);
a row of ``N`` elements reads ``W = ceil(N / 2)`` words, those of indices ``r * W + k`` for row
``r``: column ``c < W`` reads the high half of word ``c``, column ``c >= W`` the low half of word
``c - W`` (``mask_word``), as a signed 16-bit value ``v``, and is kept where
``v >= T - 2**15``, ``T = round(p * 2**16)`` (``keep_level``).  So the drop rate is ``p`` rounded
to a multiple of 2**-16; a row never shares a word with another (a shard cut between rows computes
only its own words), and a row's two halves are contiguous blocks (two comparisons write them,
no interleaving).

Everything here works on Python ints and on numpy ``uint64`` arrays (values kept below 2**32).
"""
import numpy as np

MASK32 = 0xFFFFFFFF
KEY_WORDS = 5
# Odd constants (golden-ratio and murmur3 multipliers) folding an index's high word into the rounds.
HI_MULTIPLIERS = (0x9E3779B1, 0x85EBCA6B, 0xC2B2AE35)


def rotate_mix(x):
    """R: ``rotl16(x) - 2**16 * msb(x)``."""
    return (((x << 16) | (x >> 16)) - ((x >> 31) << 16)) & MASK32


def quadratic(x, d):
    """Q: ``x * (2x - d)``, ``d`` odd."""
    return (x * ((2 * x - d) & MASK32)) & MASK32


def _rounds(lo, keys, hi, rotate):
    C, a, *ds = keys
    x = (lo * C - a) & MASK32
    for d, multiplier in zip(ds, HI_MULTIPLIERS):
        x = quadratic(rotate(x), d)
        x = (x - hi * multiplier) & MASK32
    return x


def permute(lo, keys, hi=0):
    """The 32 random bits (unsigned) of index ``hi * 2**32 + lo`` under ``keys``."""
    return _rounds(lo, keys, hi, rotate_mix)


def rotate_trunc(x):
    """The masks' R: ``x * 2**16 + trunc(signed(x) / 2**16)`` (ints or numpy uint64 arrays)."""
    if isinstance(x, np.ndarray):
        signed = x.astype(np.int64) - (x >> np.uint64(31)).astype(np.int64) * (1 << 32)
        quotient = np.where(signed < 0, -((-signed) >> 16), signed >> 16)
        return ((x << np.uint64(16)) + (quotient % (1 << 32)).astype(np.uint64)) & np.uint64(MASK32)
    signed = x - (x >> 31) * (1 << 32)
    quotient = -((-signed) >> 16) if signed < 0 else signed >> 16
    return ((x << 16) + quotient) & MASK32


def mask_permute(lo, keys, hi=0):
    """The 32 random bits a mask reads at word index ``hi * 2**32 + lo``: ``permute`` with ``rotate_trunc``."""
    return _rounds(lo, keys, hi, rotate_trunc)


def inverse_rotate_mix(y):
    """R's inverse (tests use it to show R is a bijection)."""
    msb = (y >> 15) & 1
    x = (y + (msb << 16)) & MASK32
    return ((x >> 16) | (x << 16)) & MASK32


def to_signed(value):
    """An unsigned 32-bit word as the signed int32 OneFlow's tensors hold."""
    value &= MASK32
    return value - (1 << 32) if value >= 1 << 31 else value


def to_unsigned(value):
    return value & MASK32


# ---- dropout masks: two 16-bit elements per word -------------------------------------------------

HALF = 1 << 16


def keep_level(rate):
    """``T`` of a drop rate: an element is kept where its 16 bits, read unsigned with the sign
    bit flipped (``v + 2**15``), are ``>= T``; P(drop) = ``T / 2**16``."""
    return int(round(float(rate) * HALF))


def mask_columns(shape):
    """``(rows, N)`` of the matrix a mask of ``shape`` is read as (1-D: one column)."""
    shape = tuple(int(s) for s in shape)
    if len(shape) < 2:
        return (shape[0] if shape else 1), 1
    rows = 1
    for s in shape[:-1]:
        rows *= s
    return rows, shape[-1]


def mask_word(row, column, columns):
    """``(word index, low half?)`` of element ``(row, column)`` of a mask whose rows have ``columns``
    (ints or numpy arrays)."""
    words = (columns + 1) // 2
    low = column >= words
    if isinstance(low, np.ndarray):
        return row * words + np.where(low, column - words, column), low
    return row * words + (column - words if low else column), low


def biased_half(word, low):
    """The high (``low`` false) or low 16 bits of an unsigned word, sign bit flipped: the signed
    16-bit value ``v`` plus 2**15, in [0, 2**16) (ints, or numpy arrays with ``low`` a bool array)."""
    high, low_half = (word >> 16) & 0xFFFF, word & 0xFFFF
    half = np.where(low, low_half, high) if isinstance(low, np.ndarray) else (low_half if low else high)
    return half ^ 0x8000


def keep(word, low, level):
    """Whether the element reading this half of ``word`` (a ``mask_permute`` word) is kept at ``keep_level``
    ``level``."""
    return biased_half(word, low) >= level
