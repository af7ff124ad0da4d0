"""What the two randomness modes cost: per dropout call, and per Swin training step.

    .venv/bin/python benchmarks/randomness_cost.py --ranks 1 2 4 --calls 20 \
        --step-iters 60 --step-warmup 10 --repeats 3 --out benchmarks/results/randomness_cost.md

1. Dropout calls (p = 0.1, forward, training): ``flow.nn.Dropout``, ``libai_ext.random.layers.Dropout``
   in "fast" and in "layout_invariant" mode, on a global tensor over all ranks of a 1D
   placement, broadcast (B) or split on dim 0 (S(0)).  The three run interleaved, call by call,
   in one process per rank count; each time is one call, from a device sync to a device sync,
   and the table gives rank 0's median over ``--calls`` calls, and the ratio to
   ``flow.nn.Dropout`` on the same input (the same shard on every rank).
2. Training step: ``configs/demo_swin_digits_cpu.py`` on 1 rank, dropout 0.1 + attention dropout
   0.1 on (per mode) or off, via ``benchmarks/timed_train_net.py``.  Variants run interleaved,
   ``--repeats`` times; the step time is the median after ``--step-warmup`` iterations.
"""
import argparse
import json
import os
import statistics
import tempfile
import time

from report import publish  # benchmarks/report.py (scripts run from benchmarks/)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = [(32, 64, 192), (32, 4, 64, 64), (8, 197, 768)]
IMPLS = ("flow", "fast", "layout_invariant")
STEP_VARIANTS = {  # name: overrides
    "dropout off": ["model.drop_rate=0.0", "model.attn_drop_rate=0.0"],
    "layout_invariant": ["model.drop_rate=0.1", "model.attn_drop_rate=0.1", "train.randomness=layout_invariant"],
    "fast": ["model.drop_rate=0.1", "model.attn_drop_rate=0.1", "train.randomness=fast"],
}


# ---- inside each rank ----------------------------------------------------------------------

def time_calls(calls, out_path):
    import oneflow as flow
    from libai_ext.random.layers import Dropout

    sync = flow._oneflow_internal.eager.Sync
    placement = flow.placement("cpu", ranks=list(range(flow.env.get_world_size())))
    layers = {"flow": flow.nn.Dropout(0.1), "fast": Dropout(0.1, randomness="fast"),
              "layout_invariant": Dropout(0.1, randomness="layout_invariant")}
    results = []
    for shape in SHAPES:
        for sbp_name, sbp in (("B", flow.sbp.broadcast), ("S(0)", flow.sbp.split(0))):
            x = flow.randn(*shape).to_global(placement=placement, sbp=flow.sbp.broadcast).to_global(sbp=sbp)
            times = {name: [] for name in layers}
            for call in range(calls + 2):  # two warm-up calls each
                for name, layer in layers.items():
                    sync()
                    start = time.perf_counter()
                    layer.train()(x)
                    sync()
                    if call >= 2:
                        times[name].append(time.perf_counter() - start)
            results.append({"shape": list(shape), "sbp": sbp_name, "local_shape": list(x.to_local().shape),
                            "median_ms": {k: 1e3 * statistics.median(v) for k, v in times.items()}})
    if flow.env.get_rank() == 0:
        with open(out_path, "w") as f:
            json.dump(results, f)


# ---- the driver --------------------------------------------------------------------------------

def launch_self(nproc, calls, workdir):
    from libai_ext.testing import launch

    out = os.path.join(workdir, f"calls_{nproc}.json")
    launch(os.path.abspath(__file__), nproc, ["--rank-job", "--calls", calls, "--json", out],
           timeout=1800, workdir=os.path.join(workdir, f"logs_{nproc}"))
    with open(out) as f:
        return json.load(f)


def run_step(variant, iters, workdir, tag):
    from libai_ext.testing import launch

    output = os.path.join(workdir, f"step_{tag}")
    args = ["--config-file", os.path.join(ROOT, "configs", "demo_swin_digits_cpu.py"), f"train.train_iter={iters}",
            "train.evaluation.enabled=False", "train.log_period=1000", f"train.output_dir={output}",
            f"dataloader.train.dataset.0.root.root={workdir}/data",
            f"dataloader.test.0.dataset.root.root={workdir}/data",
            *STEP_VARIANTS[variant]]
    launch(os.path.join(ROOT, "benchmarks", "timed_train_net.py"), 1, args, timeout=1800,
           workdir=os.path.join(workdir, f"logs_step_{tag}"))
    with open(os.path.join(output, "timing_rank0.json")) as f:
        return json.load(f)["step_times"]


def calls_table(by_ranks):
    lines = ["| ranks | input | shape (local shard) | flow.nn.Dropout ms | fast ms | layout_invariant ms "
             "| fast / flow | layout_invariant / flow |", "|---|---|---|---|---|---|---|---|"]
    for nproc, rows in by_ranks.items():
        for row in rows:
            ms = row["median_ms"]
            lines.append(f"| {nproc} | {row['sbp']} | {tuple(row['shape'])} ({tuple(row['local_shape'])}) "
                         f"| {ms['flow']:.2f} | {ms['fast']:.2f} | {ms['layout_invariant']:.2f} "
                         f"| {ms['fast'] / ms['flow']:.2f}x | {ms['layout_invariant'] / ms['flow']:.2f}x |")
    return "\n".join(lines)


def step_table(steps, warmup):
    medians = {v: [statistics.median(run[warmup:]) for run in runs] for v, runs in steps.items()}
    off = statistics.median(medians["dropout off"])
    lines = ["| variant | step time (ms), median of repeats | per repeat | / dropout off |", "|---|---|---|---|"]
    for variant, values in medians.items():
        step = statistics.median(values)
        lines.append(f"| {variant} | {1e3 * step:.1f} | {', '.join(f'{1e3 * v:.1f}' for v in values)} "
                     f"| {step / off:.3f}x |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--step-iters", type=int, default=60)
    parser.add_argument("--step-warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3, help="training-step runs per variant (0: skip)")
    parser.add_argument("--out", help="also write the markdown report here")
    parser.add_argument("--rank-job", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_job:
        return time_calls(args.calls, args.json)

    workdir = tempfile.mkdtemp(prefix="randomness-cost-")
    by_ranks = {nproc: launch_self(nproc, args.calls, workdir) for nproc in args.ranks}
    report = ["## Dropout calls (p = 0.1, forward), rank 0's median of "
              f"{args.calls} interleaved calls", "", calls_table(by_ranks)]
    if args.repeats:
        steps = {variant: [] for variant in STEP_VARIANTS}
        for repeat in range(args.repeats):
            for variant in STEP_VARIANTS:
                tag = f"{variant.replace(' ', '_')}_{repeat}"
                steps[variant].append(run_step(variant, args.step_iters, workdir, tag))
        report += ["", f"## Training step: configs/demo_swin_digits_cpu.py, 1 rank, {args.step_iters} iterations, "
                       f"median after {args.step_warmup}, variants interleaved x {args.repeats}", "",
                   step_table(steps, args.step_warmup)]
    text = "\n".join(report) + "\n"
    publish(text, args.out, title="Dropout masks and a Swin step under each randomness mode")


if __name__ == "__main__":
    main()
