"""The one key function: every draw of a run takes its key from ``key(seed, what, counters...)``.

A key is blake2b of the words' ``repr``, as many bits as the draw needs, so two draws share a key only when they name
the same words. It keys the data order (``global_order``: ``key(seed, "order", epoch)``), a sample's and a batch's
``collate_fn`` seeds (``keyed_dataset``), a step's mixup (``global_mixup``), the counter hash's words and the step key a
layer's draw derives from (``counter_rng``, ``step_key``), the "fast" mode's shard generators (``shard_rng``) and the
per-scope seeds (``seeding``).
"""
import hashlib

_MAX_BITS = 8 * hashlib.blake2b().digest_size


def key(*words, bits=64):
    """A non-negative int of ``bits`` bits (a multiple of 8, at most 512) from any words with a stable ``repr``
    (ints, strings, tuples of them)."""
    if bits % 8 or not 8 <= bits <= _MAX_BITS:
        raise ValueError(f"a key has a multiple of 8 bits, 8 to {_MAX_BITS}; got {bits}")
    digest = hashlib.blake2b(repr(words).encode(), digest_size=bits // 8).digest()
    return int.from_bytes(digest, "little")


def key_words(*words, count, bits=32):
    """``count`` words of ``bits`` bits each, from one ``key`` of ``count * bits`` bits (least significant first)."""
    value, mask = key(*words, bits=count * bits), (1 << bits) - 1
    return [(value >> (bits * i)) & mask for i in range(count)]


def step_key(seed, step):
    """The step's key: two odd words of ``key(seed, "step", step)`` as signed int32, from which every draw of the
    step derives its counter keys ``C`` and ``a`` (``counter_rng.call_keys``; a graph takes them as an input)."""
    value = key(int(seed), "step", int(step))
    low, high = (value | 1) & 0xFFFFFFFF, ((value >> 32) | 1) & 0xFFFFFFFF  # (no helper: made at every micro-step)
    return low - (low >> 31 << 32), high - (high >> 31 << 32)
