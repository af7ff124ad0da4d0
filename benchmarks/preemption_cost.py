"""What preemption costs a training step: the same job with ``train.preemption.enabled`` on and off.

    .venv/bin/python benchmarks/preemption_cost.py [--ranks 2 4 8] [--iters 40] [--warmup 10] [--repeats 3]
        [--model demo|gpt2] [--out benchmarks/results/preemption_cost.md]

With preemption on (the default), the ranks agree at the end of every step whether any of them
was signalled: one all-gather of a flag, read on every rank.  Runs ``benchmarks/trainer_overhead.py``'s
job (the demo, or LiBai's GPT-2 with ``--model gpt2``; 2 ranks pp2, 4 ranks dp2 x pp2, 8 ranks
dp2 x tp2 x pp2; ``ConsistentBatchTrainer``'s default path) with preemption on and off, interleaved
``--repeats`` times (each repeat starts with the other), and reports rank 0's median step time
after ``--warmup`` steps, its spread over the repeats, and the ratio on / off.
"""
import argparse
import os
import statistics
import tempfile

import trainer_overhead  # benchmarks/trainer_overhead.py (scripts run from benchmarks/)
from report import publish

VARIANTS = {"preemption on": ["train.preemption.enabled=True"], "preemption off": ["train.preemption.enabled=False"]}
BASE = trainer_overhead.VARIANTS["layout_invariant"]


def measure(model, nproc, iters, warmup, repeats, workdir):
    """{variant: [rank 0's median step time per repeat]}."""
    data = os.path.join(workdir, "data")
    steps = {variant: [] for variant in VARIANTS}
    for repeat in range(repeats):
        for variant in trainer_overhead.rotated(list(VARIANTS), repeat):
            trainer_overhead.VARIANTS[variant] = BASE + VARIANTS[variant]
            timings = trainer_overhead.run(model, nproc, variant, iters, os.path.join(workdir, str(repeat)), data)
            steps[variant].append(statistics.median(timings[0]["step_times"][warmup:]))
    return steps


def table(results):
    """One row per rank count and variant: rank 0's step, median and spread over the repeats, and on / off."""
    rows = ["| ranks (dp,tp,pp) | preemption | step time (s) | min-max over repeats | on / off |",
            "|---|---|---|---|---|"]
    for nproc, steps in results.items():
        medians = {variant: statistics.median(times) for variant, times in steps.items()}
        off = medians["preemption off"]
        rows += [f"| {nproc} {trainer_overhead.LAYOUTS[nproc]} | {variant.split()[1]} | {medians[variant]:.3f} "
                 f"| {min(times):.3f}-{max(times):.3f} | {trainer_overhead.ratio(medians[variant], off)} |"
                 for variant, times in steps.items()]
    return "\n".join(rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, nargs="+", default=[2], choices=sorted(trainer_overhead.LAYOUTS))
    parser.add_argument("--iters", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", choices=sorted(trainer_overhead.MODELS), default="demo")
    parser.add_argument("--out", default=None, help="also write the markdown report here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="preemption-cost-") as workdir:
        results = {nproc: measure(args.model, nproc, args.iters, args.warmup, args.repeats, workdir)
                   for nproc in args.ranks}
    publish(table(results) + "\n", args.out, title=f"Preemption's cost per step ({args.model})")


if __name__ == "__main__":
    main()
