"""What layout_invariant initial weights cost: building a model with and without the re-draw.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/param_init_cost.py --repeats 3 \
        --out benchmarks/results/param_init_cost.md

One rank, one process, in the config's layout-free form (dp = tp = pp = 1).  Per config, three
builds run interleaved ``--repeats`` times, each from ``seed_from_config``; the table gives the
median wall time of each:

* ``stock``: LiBai's ``DefaultTrainer.build_model`` (the model's own init, OneFlow's generator);
* ``recorded``: the same build inside ``recording_init`` (watching the init, a copy of every draw);
* ``re-draw``: ``reinitialize`` after it (replay check, counter-based draws, writes).

The ratio is (recorded + re-draw) / stock: what ``ConsistentBatchTrainer.build_model`` costs over
the stock build in ``train.randomness="layout_invariant"``.
"""
import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
CONFIGS = ("configs/demo_swin_digits_cpu.py", "configs/swin_cifar100.py")


def setup_single_rank():
    from libai.utils import distributed as dist
    from omegaconf import DictConfig

    import libai_ext

    libai_ext.apply_patches()
    dist.setup_dist_util(DictConfig({"data_parallel_size": 1, "tensor_parallel_size": 1,
                                     "pipeline_parallel_size": 1, "pipeline_num_layers": 1}))


def timed(function):
    import oneflow as flow

    flow._oneflow_internal.eager.Sync()
    start = time.perf_counter()
    result = function()
    flow._oneflow_internal.eager.Sync()
    return result, time.perf_counter() - start


def measure(config, repeats):
    from libai.config import LazyConfig
    from libai.engine import DefaultTrainer

    from libai_ext import recording_init, reinitialize, seed_from_config

    cfg = LazyConfig.load(os.path.join(ROOT, config))
    times = {"stock": [], "recorded": [], "re-draw": []}
    parameters = redrawn = 0
    for _ in range(repeats):
        seed_from_config(cfg)
        model, seconds = timed(lambda: DefaultTrainer.build_model(cfg))
        times["stock"].append(seconds)
        parameters = sum(p.numel() for p in model.parameters())
        del model
        seed_from_config(cfg)
        with recording_init() as recorder:
            model, seconds = timed(lambda: DefaultTrainer.build_model(cfg))
        times["recorded"].append(seconds)
        names, seconds = timed(lambda: reinitialize(model, recorder, cfg.train.seed))
        times["re-draw"].append(seconds)
        redrawn = len(names)
        model = recorder = None  # free both before the next repeat
    return parameters, redrawn, {key: statistics.median(values) for key, values in times.items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out")
    args = parser.parse_args()
    import logging

    logging.disable(logging.INFO)  # LiBai prints the whole model at each build
    setup_single_rank()
    lines = ["| config | parameters | tensors re-drawn | stock build (s) | recorded build (s) | re-draw (s) | ratio |",
             "|---|---|---|---|---|---|---|"]
    for config in args.configs:
        parameters, redrawn, t = measure(config, args.repeats)
        ratio = (t["recorded"] + t["re-draw"]) / t["stock"]
        lines.append(f"| {config} | {parameters / 1e6:.2f} M | {redrawn} | {t['stock']:.3f} | {t['recorded']:.3f} "
                     f"| {t['re-draw']:.3f} | {ratio:.2f}x |")
        print(lines[-1], flush=True)
    if args.out:
        from benchmarks.report import header

        with open(args.out, "w") as f:
            f.write(header("Initial weights from the seed: the cost of building a model")
                    + f"1 rank, median of {args.repeats}:\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
