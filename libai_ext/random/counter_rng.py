"""Counter-based random bits keyed by each element's *global* position ("layout_invariant").

Every element of a (global) tensor gets 32 random bits that depend only on the keys of the
draw and on the element's flat index in the global tensor, never on which rank computes them:

* replicas (``B``, and ``P`` read as ``B``) compute identical bits, with no communication;
* shards (``S``) compute their own slices of one global draw;
* the same keys give the same global tensor on 1 rank and on (2, 2, 2), for any placement.

The bits are a keyed permutation of the index (``counter_spec`` states it with bit operations
and proves each step a bijection): ``A`` (odd multiplier, offset), then three rounds of ``R`` (the
high half moved down) and ``Q`` (the quadratic permutation ``x (2x - d)``).  Here it is written
with the int32 ops OneFlow 0.9.0 computes exactly on every device (measured on CPU): ``*`` and
``-`` (wrapping), ``+`` and ``-`` of a Python int, comparisons, and casts.  ``+`` of two int32
tensors and unary ``-`` go through float32 and round, so they are never used; there are no
bitwise ops; ``//`` truncates and costs 8 multiplies, so ``R`` divides by 2**16 through an exact
float64 multiply and a truncating cast.

Where the index lives (``global_index``): eager ranks hash their own slice with local ops
(``local_counter_bits``), ``nn.Graph`` traces the same bits from global ops (``counter_bits``
with a placement); under gradient accumulation a micro-batch's rows are numbered by their place
in the step's global batch (``global_index.StepRows``).

Keys: ``derive_keys(*words)`` for one-off draws (initial weights), ``call_keys`` for a layer's
draw number ``(step, call)``: each of the five keys is the permutation of a linear function of
(step, call) under the stream's own keys, computed on the host for eager layers
(``counter_spec``) and from an int32 step tensor inside a graph, with the same bits.
"""
import functools
import hashlib

import numpy as np
import oneflow as flow

from . import counter_spec, global_index
from .counter_spec import HI_MULTIPLIERS, KEY_WORDS, to_signed

try:  # built by `pip install` where a C compiler exists (setup.py); the int32 ops otherwise
    from . import _counter_kernel
except ImportError:
    _counter_kernel = None
_HOST_DTYPES = {flow.float32: np.float32, flow.float64: np.float64}

_INT32 = 2 ** 32


def _hash_words(count, words):
    digest = hashlib.blake2b(repr(words).encode(), digest_size=4 * count).digest()
    return [to_signed(int.from_bytes(digest[4 * i:4 * i + 4], "little")) for i in range(count)]


def _odd_where_needed(keys):
    """``C`` and every ``d`` odd (``a`` is free)."""
    return tuple(k if i == 1 else k | 1 for i, k in enumerate(keys))


def derive_keys(*words):
    """``(C, a, d1, d2, d3)`` (signed int32) from any words (seed, stream, name, ...)."""
    return _odd_where_needed(_hash_words(KEY_WORDS, words))


@functools.lru_cache(maxsize=4096)
def stream_words(seed, stream):
    """A stream's words: its own permutation keys, then per key word a step multiplier (odd),
    a call multiplier (odd) and an offset."""
    own = derive_keys(seed, stream, "own")
    linear = _hash_words(3 * KEY_WORDS, (seed, stream, "linear"))
    return own, tuple(linear[i] | 1 if i % 3 < 2 else linear[i] for i in range(3 * KEY_WORDS))


def _key_inputs(linear, call):
    """Per key word: ``(step multiplier, constant)`` with the call folded into the constant."""
    return [(linear[3 * k], to_signed(linear[3 * k + 1] * call + linear[3 * k + 2])) for k in range(KEY_WORDS)]


def call_keys(words, step, call=0):
    """The keys of a layer's draw ``(step, call)``: ints for an int ``step``, int32 tensors (one
    element each, laid out like ``step``) for a tensor ``step`` (a graph's input), same bits."""
    own, linear = words
    inputs = _key_inputs(linear, call)
    if isinstance(step, flow.Tensor):
        multipliers = _int32_like(step, [m for m, _ in inputs])
        constants = _int32_like(step, [c for _, c in inputs])
        hashed = mix((step.reshape(1) * multipliers - constants) * own[0] - own[1], own)
        return tuple(hashed[i:i + 1] * 2 + 1 if i != 1 else hashed[i:i + 1] for i in range(KEY_WORDS))
    own_unsigned = [k & counter_spec.MASK32 for k in own]
    values = [counter_spec.permute((int(step) * m - c) & counter_spec.MASK32, own_unsigned) for m, c in inputs]
    return tuple(to_signed(v * 2 + 1) if i != 1 else to_signed(v) for i, v in enumerate(values))


def stream_keys(seed, stream, step, call=0):
    """``call_keys`` on the host: the keys of a layer's draw ``(step, call)``, as ints."""
    return call_keys(stream_words(seed, stream), int(step), int(call))


def _int32_like(tensor, values):
    if tensor.is_global:
        return flow.tensor(values, dtype=flow.int32, placement=tensor.placement,
                           sbp=[flow.sbp.broadcast] * len(tensor.sbp))
    return flow.tensor(values, dtype=flow.int32, device=tensor.device)


# ---- the permutation on int32 tensors ------------------------------------------------------

def _trunc_div_2_16(x):
    # Exact: int32 -> float64 is exact, so is the scaling by a power of two, and the cast
    # truncates toward zero like C; cheaper than OneFlow's integer ``//`` (measured 0.5 vs 0.85 ms).
    return (x.to(flow.float64) * 2.0 ** -16).to(flow.int32)


def rotate_mix(x):
    """R on signed int32: ``x * 2**16 + floor(x / 2**16)`` (= ``counter_spec.rotate_mix``)."""
    quotient = _trunc_div_2_16(x)  # truncated; floor is one less where x < 0 is not a multiple
    below = x < quotient * 2 ** 16
    return x * 2 ** 16 - (below - quotient)


def quadratic(x, d):
    """Q: ``x * (2x - d)`` (``d`` an odd int or an int32 tensor; ``tensor - tensor`` is exact)."""
    return x * (x * 2 - d)


def mix(x, keys, hi=None):
    """The rounds after ``A``: ``x`` holds ``lo * C - a``; ``hi`` the index's high words, if any."""
    for d, multiplier in zip(keys[2:], HI_MULTIPLIERS):
        x = quadratic(rotate_mix(x), d)
        if hi is not None:
            x = x - hi * to_signed(multiplier)
    return x


# ---- bits of whole tensors and of slices ----------------------------------------------------

def counter_bits(shape, keys, placement=None, sbp=None, device=None, rows=None):
    """int32 random bits for a tensor of ``shape``: global with ``placement`` and ``sbp`` (global
    ops only: what ``nn.Graph`` traces), else local on ``device``.  ``rows``: a
    ``global_index.StepRows`` when dim 0 is a micro-batch of a larger step."""
    x0, hi = global_index.keyed_index(tuple(int(s) for s in shape), keys, placement, sbp, device, rows)
    return mix(x0, keys, hi)


def local_counter_bits(shape, lo, hi, keys, device=None, rows=None):
    """``counter_bits`` of the slice ``[lo, hi)`` of a global tensor of ``shape``, from local ops
    (cheaper to launch than global ones), as a local tensor on ``device``."""
    pieces = [mix(x0, keys, high) for x0, high in global_index.keyed_slice(shape, lo, hi, keys, device, rows)]
    return pieces[0] if len(pieces) == 1 else flow.cat(pieces, dim=0)


shard_box = global_index.shard_box


def host_kernel_serves(device, dtype):
    """Whether ``local_keep_mask`` runs the fused host loop here: a CPU tensor of float32/64 and
    the compiled kernel present."""
    kind = device if isinstance(device, str) else device.type
    return _counter_kernel is not None and kind.split(":")[0] == "cpu" and dtype in _HOST_DTYPES


def local_keep_mask(shape, lo, hi, keys, rate, scale, device=None, dtype=flow.float32, rows=None):
    """The slice ``[lo, hi)`` of a global tensor's dropout mask as a local tensor of ``dtype``: ``scale``
    where kept, 0 where dropped; the bits of ``counter_bits``.  On CPU one fused host loop writes it
    (``_counter_kernel``); elsewhere the int32 ops do."""
    device = device or "cpu"
    if not host_kernel_serves(device, dtype):
        bits = local_counter_bits(shape, lo, hi, keys, device=device, rows=rows)
        return (bits >= keep_threshold(rate)).to(dtype) * scale
    local_shape = [int(b) - int(a) for a, b in zip(lo, hi)]
    values = np.empty(local_shape, dtype=_HOST_DTYPES[dtype])
    _counter_kernel.keep_mask(values, global_index.slice_terms(shape, lo, hi, rows), keys, keep_threshold(rate),
                              float(scale))
    return flow.from_numpy(values)  # shares the array's memory: no copy


def keep_threshold(rate):
    """Signed int32 ``t`` with P(uniform int32 >= t) = ``1 - rate`` (to 2**-32)."""
    return int(round(-2 ** 31 + rate * _INT32))


def keep_mask(shape, rate, keys, placement=None, sbp=None, device=None, rows=None):
    """bool tensor: True (keep) with probability ``1 - rate``, keyed by global position."""
    return counter_bits(shape, keys, placement, sbp, device, rows) >= keep_threshold(rate)


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
