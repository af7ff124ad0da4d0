"""The counter-based permutation of ``counter_rng``, written with bit operations (the specification).

``counter_rng`` computes it with OneFlow 0.9.0's int32 tensor ops (no bitwise ops, no shifts); this module states it on
unsigned 32-bit words for a reader, and is the host's implementation (a call's keys are hashed here: a few Python
ints, cheaper than any device op). ``tests/test_counter_rng.py`` checks that both give the same bits and keeps
known-answer vectors of this one. For keys ``(C, a, d1, d2, d3)`` (``C`` and every ``d`` odd) and a 64-bit index
``i = hi * 2**32 + lo``:

    x = lo * C - a                              A: an odd multiplier and an offset
    for j in 1, 2, 3:
        x = rotl16(x) - 2**16 * msb(x)          R: the high half moves down
        x = x * (2 * x - d_j)                   Q: a quadratic permutation (RC6's x(2x+1), keyed)
        x = x - hi * HI_MULTIPLIERS[j - 1]      (only where hi > 0)

all modulo 2**32. Each step is a bijection: ``C`` is odd; R's subtracted msb is read back from bit 15
(``inverse_rotate_mix``); ``2x**2 - d x`` permutes modulo 2**w by Rivest's criterion ("Permutation polynomials modulo
2**w", 2001: ``a1`` odd, ``a2 + a4 + ...`` and ``a3 + a5 + ...`` even), where the unkeyed ``x (x - a)`` maps ``x`` and
``a - x`` to one value. So within one call no two elements of a tensor under 2**32 elements share their bits. ``R``
gives the low bits what a T-function (every ``*``, ``-``) lacks, a dependence on the high bits.

Masks read their words from ``mask_permute``: ``R`` replaced by ``rotate_trunc``, one OneFlow ``//`` where the floor
costs four more ops. It is no bijection (2**16 - 1 colliding pairs of 2**32 per round), which a mask never needs; the
battery of ``tests/test_counter_rng.py`` holds for it. How a mask reads 16 bits per element (``mask_word``, ``keep``):
docs/randomness.md. A row never shares a word with another (a shard cut between rows computes only its own words),
and a row's two halves are contiguous blocks (two comparisons write them, no interleaving).

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
