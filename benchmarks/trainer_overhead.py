"""Stock DefaultTrainer vs ConsistentBatchTrainer (default path and stage-0-only loading).

    .venv/bin/python benchmarks/trainer_overhead.py [--iters 60] [--repeats 2] [--ranks 2 4 8]

Trains the demo model (configs/demo_pipeline_cpu.py, augmentation and mixup on, no
evaluation) on 2 ranks (pp2), 4 ranks (dp2 x pp2) and 8 ranks (dp2 x tp2 x pp2).  The three
variants run interleaved, `--repeats` times, in one invocation.  Reports the median step
time on rank 0 (after `--warmup` iterations), the median data time per stage, and the
ratios to stock.  Writes benchmarks/results/trainer_overhead.md.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from libai_ext.testing import launch  # noqa: E402

LAYOUTS = {2: (1, 1, 2), 4: (2, 1, 2), 8: (2, 2, 2)}
VARIANTS = {
    "stock": ["train.trainer=libai.engine.DefaultTrainer"],
    "consistent": ["train.trainer=libai_ext.ConsistentBatchTrainer", "train.stage0_only_loading=False"],
    "consistent+stage0-only": ["train.trainer=libai_ext.ConsistentBatchTrainer", "train.stage0_only_loading=True"],
}


def run(nproc, variant, iters, workdir):
    dp, tp, pp = LAYOUTS[nproc]
    output = os.path.join(workdir, f"{nproc}-{variant}")
    args = ["--config-file", os.path.join(ROOT, "configs", "demo_pipeline_cpu.py"), *VARIANTS[variant],
            f"train.train_iter={iters}", "train.evaluation.enabled=False", "train.log_period=1000",
            f"train.output_dir={output}", f"dataloader.train.dataset.0.root.root={workdir}/data",
            f"train.dist.data_parallel_size={dp}", f"train.dist.tensor_parallel_size={tp}",
            f"train.dist.pipeline_parallel_size={pp}"]
    launch(os.path.join(ROOT, "benchmarks", "timed_train_net.py"), nproc, args, timeout=900,
           workdir=output + "-logs")
    timings = {}
    for rank in range(nproc):
        with open(os.path.join(output, f"timing_rank{rank}.json")) as f:
            timings[rank] = json.load(f)
    return timings


def summarize(timings, nproc, warmup):
    per_stage = nproc // LAYOUTS[nproc][2]
    step = statistics.median(timings[0]["step_times"][warmup:])
    data = {stage: statistics.median(t for r in range(nproc) if r // per_stage == stage
                                     for t in timings[r]["data_times"][warmup:])
            for stage in range(LAYOUTS[nproc][2])}
    return step, data


def table(results):
    lines = ["| ranks (dp,tp,pp) | trainer | step time (s) | step / stock | data time stage 0 (ms) "
             "| data time other stages (ms) | other stages / stock |",
             "|---|---|---|---|---|---|---|"]
    for nproc, by_variant in results.items():
        stock_step, stock_data = by_variant["stock"]
        for variant, (step, data) in by_variant.items():
            others = statistics.mean(v for s, v in data.items() if s > 0)
            stock_others = statistics.mean(v for s, v in stock_data.items() if s > 0)
            lines.append(f"| {nproc} {LAYOUTS[nproc]} | {variant} | {step:.3f} | {step / stock_step:.3f} "
                         f"| {1e3 * data[0]:.2f} | {1e3 * others:.3f} | {others / stock_others:.3f} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "trainer_overhead.md"))
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="overhead-")
    results = {}
    for nproc in args.ranks:
        samples = {variant: [] for variant in VARIANTS}
        for repeat in range(args.repeats):
            for variant in VARIANTS:  # interleaved, so drift hits every variant alike
                timings = run(nproc, variant, args.iters, os.path.join(workdir, f"r{repeat}"))
                samples[variant].append(summarize(timings, nproc, args.warmup))
                print(f"{nproc} ranks, {variant}, repeat {repeat}: step {samples[variant][-1][0]:.3f} s", flush=True)
        results[nproc] = {v: (statistics.median(s for s, _ in runs),
                              {st: statistics.median(d[st] for _, d in runs) for st in runs[0][1]})
                          for v, runs in samples.items()}
    text = table(results)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(f"Command: `.venv/bin/python benchmarks/trainer_overhead.py --iters {args.iters} "
                f"--warmup {args.warmup} --repeats {args.repeats} --ranks {' '.join(map(str, args.ranks))}`\n\n")
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
