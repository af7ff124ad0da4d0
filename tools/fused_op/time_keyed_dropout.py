"""Eager CPU forward cost of the keyed-dropout op sketch beside libai_ext's current mask paths and OneFlow's dropout.

    python tools/fused_op/check_keyed_dropout.py --oneflow-source DIR --keep BUILD_DIR   # builds the op
    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python tools/fused_op/time_keyed_dropout.py BUILD_DIR

One process, a float32 (rows, 1024) local tensor (`--rows`, default 1024), rate 0.1; the paths take turns
(other jobs' load then falls on all of them), 3 warm-up rounds then 25, each call synchronised by reading
one element back; printed: each path's fastest call (the least disturbed on a shared machine) and median.
Paths: the fused op; `local_keep_mask` (the host loop of _counter_kernel.c, eager CPU ranks' path) then
`apply_keep`; `keep_mask` (int32 ops, the path of graphs and GPUs) then `apply_keep`;
`flow.nn.functional.dropout`.
"""
import argparse
import sys
import time

import numpy as np
import oneflow as flow

from libai_ext.random import counter_rng
from libai_ext.random.layers.stochastic import apply_keep, dropout_scale

RATE = 0.1


def timings_ms(paths, rounds=25, warmup=3):
    times = {name: [] for name in paths}
    for i in range(warmup + rounds):
        for name, run in paths.items():
            start = time.perf_counter()
            run().view(-1)[0].item()
            if i >= warmup:
                times[name].append(1e3 * (time.perf_counter() - start))
    return {name: (min(values), float(np.median(values))) for name, values in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build_dir")
    parser.add_argument("--rows", type=int, default=1024)
    args = parser.parse_args()
    sys.path.insert(0, args.build_dir)
    keyed_dropout = __import__("libai_ext_keyed_dropout").keyed_dropout

    shape = (args.rows, 1024)
    x = flow.randn(*shape)
    keys = counter_rng.stream_keys(1234, "#0", 3, 0)
    level, scale = counter_rng.keep_level(RATE), dropout_scale(RATE)
    zeros = [0] * len(shape)
    paths = {
        "fused op": lambda: keyed_dropout(x, list(keys), level, scale),
        "host loop + apply_keep": lambda: apply_keep(
            x, counter_rng.local_keep_mask(shape, zeros, list(shape), keys, RATE), scale),
        "int32 ops + apply_keep": lambda: apply_keep(x, counter_rng.keep_mask(shape, RATE, keys, device="cpu"), scale),
        "flow dropout": lambda: flow.nn.functional.dropout(x, RATE, training=True),
    }
    fused = paths["fused op"]().numpy()
    host = paths["host loop + apply_keep"]().numpy()
    print(f"{shape[0] * shape[1]} elements, rate {RATE}: fused op equals the host loop's result: "
          f"{np.array_equal(fused, host)}")
    timings = timings_ms(paths)
    fastest = timings["fused op"][0]
    for name, (least, median) in timings.items():
        print(f"  {name:24s} fastest {least:7.2f} ms ({least / fastest:.2f}x the fused op), median {median:7.2f} ms",
              flush=True)

if __name__ == "__main__":
    main()
