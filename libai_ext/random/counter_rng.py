"""Counter-based random bits keyed by each element's *global* position ("layout_invariant").

``counter_bits(shape, keys, placement, sbp)`` gives every element of a (global) tensor 32
random bits that depend only on ``keys`` and the element's flat index in the global tensor,
never on which rank computes it.  Hence, with no communication:

* replicas (``B``, and ``P`` treated as ``B``) compute identical bits,
* shards (``S``) compute different bits, each rank for its own slice only,
* the same keys give the same global tensor on 1 rank and on (2, 2, 2), for any placement.

The hash is built for OneFlow 0.9.0's kernels (measured on CPU), where ``int32`` ``*``, ``-``,
``//`` and ``+`` of a Python int are exact (wrapping) and cheap, while ``int32`` tensor ``+``
tensor (and unary ``-``) go through floating point and round, so they are never used;
``int64`` ops, ``%`` and broadcasting two vectors against each other are slow; each op costs
0.1-0.3 ms of launch overhead on a loaded host (so fewer, larger ops win); there are no
bitwise ops:

1. ``h = -flat_index * C (mod 2**32)``: with ``C`` odd this is a bijection, so no two
   elements of a tensor under 2**32 elements share an input.  One ``arange`` when no
   dimension is split; else one small ``arange`` per group of dimensions (split dimensions
   alone, unsplit neighbours merged) subtracted from zeros: each rank only materialises its
   own slice.
2. two quadratic rounds ``h = h * (h - a)`` (the nonlinear step; a multiply by a constant
   and ``+`` alone stay nearly linear, measured: 118-sigma row correlations), each followed by
   ``h -= h >> 16`` with the shift written ``h // 2**16`` (exact integer arithmetic, the same
   on every device), then ``h *= M``.

Eager global tensors hash this rank's slice with local ops (``shard_box``, ``local_counter_bits``:
fewer launch costs) and write it into the local part of a global mask; ``counter_bits`` with a
placement, the same bits from global ops only, is what ``nn.Graph`` traces.

The keys ``(C, a1, a2)`` of a layer's call are ``call_keys(stream_words(seed, stream), call)``:
the call counter hashed by ``finalize`` itself, so every call gets unrelated maps.  The same code
runs on host ints (``HostInt32``: eager layers, no device op per call) and on an int32 tensor
holding the counter (``nn.Graph``, where the counter must be a tensor to change between steps),
with the same bits.  Keys may therefore be ints or int32 tensors everywhere below; a tensor key
only ever meets ``*`` and tensor ``-`` tensor, never ``+``.

The high bits of ``h`` are the best mixed ones: masks compare ``h`` against a threshold
(``keep_mask``).  ``tests/test_stochastic.py`` checks the drop rate and the correlations between
neighbouring elements, rows, planes and steps.
"""
import functools
import hashlib

import numpy as np
import oneflow as flow

_M = -2048144789  # 0x85ebca6b, murmur3's fmix32 multiplier as a signed int32
_INT32 = 2 ** 32


def _signed32(value):
    value %= _INT32
    return value - _INT32 if value >= 2 ** 31 else value


def _hash_words(count, words):
    digest = hashlib.blake2b(repr(words).encode(), digest_size=4 * count).digest()
    return [_signed32(int.from_bytes(digest[4 * i:4 * i + 4], "little")) for i in range(count)]


def derive_keys(*words):
    """``(C, a1, a2)`` (signed int32, ``C`` odd) from any words (seed, stream, counter, ...)."""
    keys = _hash_words(3, words)
    return (keys[0] | 1,) + tuple(keys[1:])


class HostInt32:
    """A host int that wraps like OneFlow 0.9.0's int32 kernels, for the ops ``finalize`` uses.

    Their ``//`` truncates toward zero (measured on CPU, eager and graph), unlike Python's.
    """
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = _signed32(int(value))

    def __mul__(self, other):
        return HostInt32(self.value * int(other))

    def __sub__(self, other):
        return HostInt32(self.value - int(other))

    def __add__(self, other):
        return HostInt32(self.value + int(other))

    def __floordiv__(self, other):
        quotient = abs(self.value) // abs(int(other))
        return HostInt32(quotient if (self.value < 0) == (int(other) < 0) else -quotient)

    def __int__(self):
        return self.value


@functools.lru_cache(maxsize=4096)
def stream_words(seed, stream):
    """Twelve int32 words of a stream, four per key: ``call_keys`` hashes the counter with them."""
    words = _hash_words(12, (seed, stream))
    return tuple(w | 1 if i % 4 == 0 else w for i, w in enumerate(words))


def call_keys(words, call):
    """``(C, a1, a2)`` for one call: ``call`` is a ``HostInt32`` or an int32 tensor (the same bits).

    Each key is ``finalize`` of ``call * m - b`` (``m`` odd: a bijection of the counter)."""
    keys = [finalize(call * m - b, (None, c, d)) for m, b, c, d in zip(*[iter(words)] * 4)]
    return (keys[0] * 2 + 1,) + tuple(keys[1:])  # C odd: a bijection of the index


def stream_keys(seed, stream, call):
    """``call_keys`` on the host: the keys of a layer's ``call``-th draw, as ints."""
    return tuple(int(k) for k in call_keys(stream_words(seed, stream), HostInt32(call)))


def _shift_right(h, bits):
    # h >> bits (arithmetic) without a shift op: exact integer floor division, one kernel.
    return h // (2 ** bits)


def finalize(h, keys):
    """Two quadratic rounds with shift-adds (see the module docstring)."""
    h = h * (h - keys[1])  # (tensor - tensor is exact, tensor + tensor is not, see above)
    h = h - _shift_right(h, 16)
    h = h * (h - keys[2])
    h = h - _shift_right(h, 16)  # without it: 1.7x the expected squared z of 2x2 rectangles
    return h * _M


def _index_sbp(sbp):
    """Partial sums hold replicas of the positions: index them like broadcast."""
    return [flow.sbp.broadcast if s == flow.sbp.partial_sum else s for s in sbp]


def _split_dims(ndim, placement, sbp):
    """Dimensions split into more than one part (a split over one rank is no split)."""
    if placement is None:
        return set()
    hierarchy = np.asarray(placement.ranks).shape
    return {d for axis, s in enumerate(sbp) for d in range(ndim) if s == flow.sbp.split(d) and hierarchy[axis] > 1}


def _dim_groups(ndim, split_dims):
    """Consecutive dimensions in runs: each split dimension alone, unsplit neighbours merged."""
    groups, run = [], []
    for d in range(ndim):
        if d in split_dims:
            groups += [run, [d]] if run else [[d]]
            run = []
        else:
            run.append(d)
    return groups + [run] if run else groups


def _scaled_key(key, factor):
    """``key * factor`` in int32, for an int key or an int32 tensor key (never negated: unary
    ``-`` of a tensor is not exact)."""
    return _signed32(key * factor) if isinstance(key, int) else key * _signed32(factor)


def _group_term(shape, group, key, sign, placement, sbp, device):
    """``(flat index contribution of ``group``'s dims) * sign * key``, shaped to broadcast."""
    sizes = [shape[d] for d in group]
    stride = int(np.prod(shape[group[-1] + 1:], dtype=np.int64))
    if placement is None:
        axis = flow.arange(int(np.prod(sizes)), dtype=flow.int32, device=device)
    else:
        split = [flow.sbp.split(group[0])] if len(group) == 1 else []
        vector_sbp = [flow.sbp.split(0) if s in split else flow.sbp.broadcast for s in sbp]
        axis = flow.arange(int(np.prod(sizes)), dtype=flow.int32, placement=placement, sbp=vector_sbp)
    term = axis * _scaled_key(key, sign * stride)
    if len(group) > 1:
        term = term.reshape(sizes)
    # unsqueeze (not reshape) keeps a split vector's axis attached to its dimension.
    for _ in range(group[0]):
        term = term.unsqueeze(0)
    for _ in range(len(shape) - group[-1] - 1):
        term = term.unsqueeze(-1)
    return term


def counter_bits(shape, keys, placement=None, sbp=None, device=None):
    """int32 random bits for a tensor of ``shape``: global with ``placement`` and ``sbp``,
    else local on ``device``.

    ``keys`` come from ``derive_keys``.  A local tensor is its own whole tensor.
    """
    shape = tuple(int(s) for s in shape)
    if not shape:
        return counter_bits((1,), keys, placement, sbp, device).reshape(())
    sbp = _index_sbp(sbp) if placement is not None else None
    groups = _dim_groups(len(shape), _split_dims(len(shape), placement, sbp))
    # h = -(flat index * C): one arange when nothing is split, else 0 - one term per group
    # (full - vector is cheap; vector + vector broadcasts and tensor + tensor are not, measured).
    if len(groups) == 1:
        return finalize(_group_term(shape, groups[0], keys[0], -1, placement, sbp, device), keys)
    if placement is None:
        h = flow.zeros(shape, dtype=flow.int32, device=device)
    else:
        h = flow.zeros(shape, dtype=flow.int32, placement=placement, sbp=sbp)
    for group in groups:
        h = h - _group_term(shape, group, keys[0], 1, placement, sbp, device)
    return finalize(h, keys)


def shard_box(shape, placement, sbp):
    """``(lo, hi)`` per dimension: the slice of a global tensor this rank holds, or None outside
    ``placement``.  OneFlow's nested balanced split: hierarchy axes in order, each splitting the
    current range of its dimension, the first ``size % parts`` parts one longer (measured)."""
    ranks = np.asarray(placement.ranks)
    where = np.argwhere(ranks == flow.env.get_rank())
    if not len(where):
        return None
    lo, hi = [0] * len(shape), list(shape)
    for axis, s in enumerate(sbp):
        for d in range(len(shape)):
            if s == flow.sbp.split(d):
                parts, part = ranks.shape[axis], int(where[0][axis])
                base, extra = divmod(hi[d] - lo[d], parts)
                lo[d] += part * base + min(part, extra)
                hi[d] = lo[d] + base + (part < extra)
    return lo, hi


def _box_runs(shape, lo, hi):
    """Dimensions in runs that are contiguous in the flat index: a run starts at dim 0 or at a
    dimension the box cuts, and takes in the dimensions after it that the box covers whole."""
    runs = []
    for d in range(len(shape)):
        if runs and lo[d] == 0 and hi[d] == shape[d]:
            runs[-1].append(d)
        else:
            runs.append([d])
    return runs


def local_counter_bits(shape, lo, hi, keys, device=None):
    """``counter_bits`` of the slice ``[lo, hi)`` of a global tensor of ``shape``, as a local
    tensor on ``device``: the same bits, from local ops (cheaper to launch than global ones)."""
    local_shape = [end - start for start, end in zip(lo, hi)]
    if not shape:
        return counter_bits((), keys, device=device)
    strides = [int(np.prod(shape[d + 1:], dtype=np.int64)) for d in range(len(shape))]
    runs = _box_runs(shape, lo, hi)

    def term(run, sign):  # sign * C * (flat index contribution of the run's dims)
        first, size = run[0], int(np.prod([local_shape[d] for d in run], dtype=np.int64))
        values = flow.arange(size, dtype=flow.int32, device=device) * _signed32(sign * keys[0] * strides[run[-1]])
        view = [1] * len(shape)
        for d in run:
            view[d] = local_shape[d]
        return (values + _signed32(sign * keys[0] * lo[first] * strides[first])).reshape(view)

    if len(runs) == 1:
        return finalize(term(runs[0], -1).reshape(local_shape), keys)
    h = flow.zeros(local_shape, dtype=flow.int32, device=device)
    for run in runs:
        h = h - term(run, 1)  # (int32 tensor + tensor goes through float in OneFlow 0.9.0: - only)
    return finalize(h, keys)


def keep_threshold(rate):
    """Signed int32 ``t`` with P(uniform int32 < t) = ``rate`` (to 2**-32)."""
    return int(round(-2 ** 31 + rate * _INT32))


def keep_mask(shape, rate, keys, placement=None, sbp=None, device=None):
    """bool tensor: True (keep) with probability ``1 - rate``, keyed by global position."""
    return counter_bits(shape, keys, placement, sbp, device) >= keep_threshold(rate)


def counter_uniform(shape, keys, placement=None, sbp=None, device=None):
    """Uniform float32 values in [0, 1), keyed by global position like ``counter_bits``."""
    bits = counter_bits(shape, keys, placement, sbp, device).to(flow.float64)
    return flow.clamp((bits + 2.0 ** 31) * 2.0 ** -32, max=1.0 - 2.0 ** -24).to(flow.float32)


def counter_unit(shape, keys, placement=None, sbp=None, device=None):
    """float64 uniform values in the open interval (0, 1) from all 32 bits (initial weights:
    no 2**-24 floor, so a normal's tail reaches 6.6 sigma instead of 5.8)."""
    bits = counter_bits(shape, keys, placement, sbp, device).to(flow.float64)
    return (bits + (2.0 ** 31 + 0.5)) * 2.0 ** -32


def counter_normal(shape, keys_pair, placement=None, sbp=None, device=None):
    """float64 standard normal values (Box-Muller on two streams), keyed by global position."""
    u1 = counter_unit(shape, keys_pair[0], placement, sbp, device)
    u2 = counter_unit(shape, keys_pair[1], placement, sbp, device)
    return flow.sqrt(flow.log(u1) * -2.0) * flow.cos(u2 * (2.0 * np.pi))
