"""What starting an epoch costs the global-order sampler: time and memory, per rank, by dataset size.

    .venv/bin/python benchmarks/epoch_order.py --out benchmarks/results/epoch_order.md

Side by side, each measurement in a fresh process (its peak resident memory over the process's own
baseline after imports):

* ``full permutation``: what the global-order sampler did before, at every epoch and every resume:
  a PCG64 permutation of ``range(n)`` (numpy), then a Python list of the epoch's entries;
* ``index shuffle``: ``GlobalOrderBatchSampler`` as it is: built, then its first batch (a keyed
  permutation evaluated at that batch's positions only).

Also, for the index shuffle: the cost of the positions a training step reads (``--step-batches``
consecutive global batches of 1024, timed in this process).  The sizes (``--sizes``) and the largest
size still measured with the full permutation (``--full-max``: 10^8 takes minutes and gigabytes)
are options.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

from report import publish  # benchmarks/report.py (scripts run from benchmarks/)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
GLOBAL_BATCH = 1024


def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def full_permutation(size):
    """The previous epoch start: permutation, then the list of the epoch's entries."""
    import numpy as np

    sequence = np.random.SeedSequence(0, spawn_key=(0x5A3F, 0))
    order = np.random.Generator(np.random.PCG64(sequence)).permutation(size)
    epoch = [int(i) for i in order[:size // GLOBAL_BATCH * GLOBAL_BATCH]]
    return epoch[:GLOBAL_BATCH]


def index_shuffle(size):
    from libai_ext.data import GlobalOrderBatchSampler

    sampler = GlobalOrderBatchSampler(range(size), GLOBAL_BATCH, seed=0)
    return next(iter(sampler))


def step_positions(size, batches):
    """Median seconds per global batch of positions, over ``batches`` consecutive global batches."""
    import numpy as np

    from libai_ext.random import epoch_order

    order, times = epoch_order(0, 0, size), []
    for k in range(batches):
        start = time.perf_counter()
        order(np.arange(k * GLOBAL_BATCH, (k + 1) * GLOBAL_BATCH))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def child(kind, size):
    """Run in a fresh process: one measurement as JSON on stdout."""
    import numpy  # noqa: F401 (imports are part of the baseline, not of the measurement)

    import libai_ext.data  # noqa: F401

    baseline = peak_mb()
    start = time.perf_counter()
    first = {"full": full_permutation, "shuffle": index_shuffle}[kind](size)
    seconds = time.perf_counter() - start
    assert len(first) == GLOBAL_BATCH
    print(json.dumps({"seconds": seconds, "memory_mb": peak_mb() - baseline}))


def measure(kind, size):
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", kind, str(size)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def report(rows, passes, args):
    lines = ["Each cell: a fresh process, from the call to the first batch of 1024 indices; memory is the rise of the "
             "process's peak resident size over its baseline after imports.", "",
             "| samples | full permutation: s | full permutation: MB | index shuffle: s | index shuffle: MB "
             "| time ratio |",
             "|---|---|---|---|---|---|"]
    for size, full, shuffle in rows:
        full_s = f"{full['seconds']:.3f}" if full else "not run"
        full_mb = f"{full['memory_mb']:.0f}" if full else "not run"
        ratio = f"{full['seconds'] / shuffle['seconds']:.0f}x" if full else ""
        lines.append(f"| {_power(size)} | {full_s} | {full_mb} | {shuffle['seconds']:.4f} | "
                     f"{shuffle['memory_mb']:.1f} | {ratio} |")
    lines += ["", f"Index shuffle, the positions of one global batch of {GLOBAL_BATCH} (what a step reads, all ranks "
              f"together), median over {args.step_batches} consecutive batches:", "",
              "| samples | ms per global batch | ns per position |", "|---|---|---|"]
    for size, seconds in passes:
        lines.append(f"| {_power(size)} | {seconds * 1e3:.3f} | {seconds / GLOBAL_BATCH * 1e9:.0f} |")
    return "\n".join(lines) + "\n"


def _power(size):
    exponent = len(str(size)) - 1
    return f"10^{exponent}" if size == 10 ** exponent else str(size)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[1e6, 1e7, 1e8])
    parser.add_argument("--full-max", type=float, default=1e7, help="largest size measured with the full permutation")
    parser.add_argument("--step-batches", type=int, default=200, help="global batches timed per size")
    parser.add_argument("--out", help="also write the table here (markdown)")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child[0], int(args.child[1]))
    rows, passes = [], []
    for size in (int(s) for s in args.sizes):
        full = measure("full", size) if size <= args.full_max else None
        rows.append((size, full, measure("shuffle", size)))
        passes.append((size, step_positions(size, args.step_batches)))
    publish(report(rows, passes, args), args.out,
            title="Starting an epoch: full permutation vs index shuffle, per rank")


if __name__ == "__main__":
    main()
