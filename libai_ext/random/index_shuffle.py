"""A keyed permutation of ``range(n)`` evaluated one position at a time, in O(1) memory (docs/data_order.md).

``IndexShuffle(n, key)(positions)`` is the entry at each position: an epoch order that is never built.  As Grain's
index shuffle, written from the textbook construction: a balanced Feistel network on ``2 * half`` bits (the smallest
even width holding ``n - 1``: a domain below ``4 n``), whose round function (the round key XORed in, SplitMix64's
finaliser, cut to ``half`` bits) may be anything, as each round is a bijection; then cycle walking: a value outside
``[0, n)`` is enciphered again, which keeps a bijection of ``[0, n)`` (under 4 passes expected).  Vectorised over a
batch of positions with numpy's wrapping uint64 arithmetic; ``n`` and positions up to ``2**62``.
"""
import numpy as np

from .keys import key_words

ROUNDS = 6  # Luby-Rackoff: 4 rounds of a random function already give a pseudo-random permutation
MAX_SIZE = 2 ** 62
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)
_SHIFTS = tuple(np.uint64(s) for s in (30, 27, 31))


def _mix(x):
    """SplitMix64's finaliser on a uint64 array (a fresh array; ``x`` is left alone)."""
    x = x ^ (x >> _SHIFTS[0])
    x *= _MIX_1
    x ^= x >> _SHIFTS[1]
    x *= _MIX_2
    x ^= x >> _SHIFTS[2]
    return x


class IndexShuffle:
    """The permutation of ``range(size)`` that ``key`` (a sequence of words for ``keys.key``) names."""

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
        out = self._encipher(positions.astype(np.uint64))
        outside = np.flatnonzero(out >= self.size)
        while outside.size:
            out[outside] = self._encipher(out[outside])
            outside = outside[out[outside] >= self.size]
        return out.astype(np.int64)

    def _encipher(self, x):
        left, right = x >> self.half, x & self.mask
        for round_key in self.round_keys:
            left, right = right, left ^ (_mix(right ^ round_key) & self.mask)
        return (left << self.half) | right
