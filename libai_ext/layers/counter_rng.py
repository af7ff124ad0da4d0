"""Counter-based random numbers keyed by each element's *global* index.

``counter_uniform(shape, placement, sbp, key)`` gives every element of a global
tensor a uniform value that depends only on ``key`` and the element's position in
the global tensor, never on which rank computes it.  Hence, with no communication:

* replicas (``B``, and ``P`` treated as ``B``) compute identical values,
* shards (``S``) compute different values, each for its own slice only,
* the same seed gives the same global tensor on 1 rank and on (2, 2, 2).

The idea is that of counter-based generators (Philox/threefry, as in JAX's
partitionable threefry or PyTorch DTensor's offset-based RNG), written with the
integer ops OneFlow 0.9.0 offers (``+ * %``, no bitwise ops): rounds of
``x -> (x + k)^5 mod p`` with the Mersenne prime ``p = 2^31 - 1``; ``x^5`` is a
bijection mod ``p`` because gcd(5, p - 1) = 1, and every product stays below 2^62.
"""
import hashlib

import oneflow as flow

PRIME = 2 ** 31 - 1
_ROUNDS = 3


def derive_keys(*words):
    """Round keys in [1, p) from any ints (seed, stream, ...): host-side, deterministic."""
    digest = hashlib.blake2b(repr(words).encode(), digest_size=8 * (_ROUNDS + 1)).digest()
    return [int.from_bytes(digest[8 * i:8 * i + 8], "little") % (PRIME - 1) + 1 for i in range(_ROUNDS + 1)]


def _round(x, key):
    x = (x + key) % PRIME
    x2 = x * x % PRIME
    return x2 * x2 % PRIME * x % PRIME


def hash_to_uniform(index, keys, counter=0):
    """Uniform float32 in [0, 1) from int64 ``index`` (any sbp), round ``keys`` and a ``counter``.

    ``counter`` may be an int or an int64 tensor (a module's call counter buffer).
    """
    x = _round(index % PRIME, keys[0])
    x = _round((x + (index // PRIME) % PRIME * keys[1]) % PRIME, keys[1])
    x = _round((x + counter % PRIME * keys[2]) % PRIME, keys[2])
    x = _round(x, keys[3])
    return x.to(flow.float32) / PRIME


def _index_sbp(sbp):
    """Partial sums hold replicas of the positions: index them like broadcast."""
    return [flow.sbp.broadcast if s == flow.sbp.partial_sum else s for s in sbp]


def global_index(shape, placement=None, sbp=None):
    """int64 tensor of flat global indices, laid out like a tensor of ``shape`` with ``sbp``.

    Built from one split ``arange`` per dimension and broadcast additions, so each rank
    computes its own slice only.  Without ``placement`` the result is a local tensor.
    """
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    index = None
    for d, size in enumerate(shape):
        if placement is None:
            axis = flow.arange(size, dtype=flow.int64)
        else:
            vector_sbp = [flow.sbp.split(0) if s == flow.sbp.split(d) else flow.sbp.broadcast
                          for s in _index_sbp(sbp)]
            axis = flow.arange(size, dtype=flow.int64, placement=placement, sbp=vector_sbp)
        axis = _expand_dims(axis * strides[d], d, len(shape))
        index = axis if index is None else index + axis
    return index


def _expand_dims(vector, dim, ndim):
    # unsqueeze (not reshape) keeps the split axis of a global vector attached to `dim`.
    for _ in range(dim):
        vector = vector.unsqueeze(0)
    for _ in range(ndim - dim - 1):
        vector = vector.unsqueeze(-1)
    return vector


def counter_uniform(shape, keys, counter=0, placement=None, sbp=None):
    """Uniform [0, 1) values for a tensor of ``shape`` (global when ``placement`` is given)."""
    return hash_to_uniform(global_index(tuple(shape), placement, sbp), keys, counter)
