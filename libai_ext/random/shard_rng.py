"""Efficiency-first randomness ("fast"): OneFlow's native kernels, one seed per shard.

OneFlow 0.9.0's ``dropout`` (and ``rand``) on a global tensor draw each rank's local part
from the generator they are given, whatever the sbp.  Seeding that generator from
(seed, stream, call, *this rank's coordinates on the hierarchy axes where the sbp splits*)
makes the native kernel SBP-correct at native speed, with no communication:

* ranks that differ only on ``B`` / ``P`` axes hold replicas: same coordinates, same seed,
  the same mask;
* ranks on different ``S`` coordinates hold different shards: different seeds.

Masks are reproducible on the same layout; unlike ``counter_rng``, they change with it.
"""
import functools
import hashlib

import numpy as np
import oneflow as flow


def shard_coordinates(placement, sbp):
    """``((axis, coordinate), ...)`` of this rank on the axes where ``sbp`` splits.

    ``()`` for a fully replicated layout; ``None`` when this rank is outside ``placement``
    (it holds no data, any seed will do).
    """
    coordinates = _rank_coordinates(placement)
    if coordinates is None:
        return None
    return tuple((axis, coordinates[axis]) for axis, s in enumerate(sbp)
                 if s not in (flow.sbp.broadcast, flow.sbp.partial_sum))


@functools.lru_cache(maxsize=256)
def _rank_coordinates(placement):
    where = np.argwhere(np.asarray(placement.ranks) == flow.env.get_rank())
    return tuple(int(c) for c in where[0]) if len(where) else None


def shard_generator(*words):
    """A fresh generator seeded from ``words`` (seed, stream, call, shard coordinates).

    Fresh per call: OneFlow's eager kernels run asynchronously and read their generator
    when they execute, so re-seeding a shared one could race with the previous call.
    """
    digest = hashlib.blake2b(repr(words).encode(), digest_size=8).digest()
    generator = flow.Generator()  # "auto": the device of whatever tensor it draws for
    generator.manual_seed(int.from_bytes(digest, "little") >> 1)
    return generator
