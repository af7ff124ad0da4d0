"""Exhaustive check that one key of the counter-based generator is a bijection of all 2**32 indices.

    .venv/bin/python benchmarks/generator_bijection.py --out benchmarks/results/generator_bijection.md

The structural proof is tested in tests/test_counter_rng.py (each step of the mix has an exact inverse,
and no two of 2**24 elements of one call share their bits); this run checks the whole 32-bit index
space of one key with the int32 ops eager ranks and graphs run: every 32-bit word must be hit exactly
once.  It needs 4 GiB of memory for the flags and a few minutes, so it is a script, not a test.
"""
import argparse
import os
import sys
import time

import numpy as np

from report import publish  # benchmarks/report.py (scripts run from benchmarks/)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from libai_ext.random.counter_rng import derive_keys, local_counter_bits  # noqa: E402

INDICES, CHUNK = 2 ** 32, 2 ** 26


def words_hit(keys):
    """How many distinct 32-bit words the key's 2**32 indices give (each chunk sorted first, so that
    the flags are written in order)."""
    seen = np.zeros(INDICES, dtype=np.uint8)
    for start in range(0, INDICES, CHUNK):
        bits = local_counter_bits((INDICES,), (start,), (start + CHUNK,), keys).numpy().view(np.uint32)
        bits.sort()
        seen[bits] = 1
    return int(seen.sum(dtype=np.int64))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--stream", default="probe")
    parser.add_argument("--call", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    start = time.perf_counter()
    hit = words_hit(derive_keys(args.seed, args.stream, args.call))
    verdict = "a bijection" if hit == INDICES else f"NOT a bijection: {INDICES - hit} words never hit"
    publish(f"Key (seed {args.seed}, stream {args.stream!r}, call {args.call}): {hit} distinct words of {INDICES}: "
            f"{verdict} ({time.perf_counter() - start:.0f} s).\n", args.out,
            title="One key of the dropout generator over all 2**32 indices")
    return 0 if hit == INDICES else 1


if __name__ == "__main__":
    sys.exit(main())
