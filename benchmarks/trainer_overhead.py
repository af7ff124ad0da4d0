"""Stock DefaultTrainer vs ConsistentBatchTrainer (default path and stage-0-only loading).

    .venv/bin/python benchmarks/trainer_overhead.py [--iters 60] [--repeats 2] [--ranks 2 4 8]
        [--model demo|gpt2|vit] [--graph] [--variants stock consistent consistent+stage0-only layout_invariant]
        [--baseline CHECKOUT]

Trains the demo model (configs/demo_pipeline_cpu.py, augmentation and mixup on, no evaluation),
with `--model gpt2` LiBai's GPT-2 pretraining (configs/libai_gpt2_cpu.py, every dropout on,
fusions off: stock LiBai has no CPU kernel for them), or with `--model vit` LiBai's ViT on the
digits (configs/libai_vit_digits_cpu.py, dropout, drop-path and mixup on), on 1 rank, 2 ranks
(pp2), 4 ranks (dp2 x pp2) and 8 ranks (dp2 x tp2 x pp2).  The variants run interleaved,
`--repeats` times, in one invocation, each repeat starting one variant later (no variant always
runs first or last).  With `--graph` every variant trains in graph mode (`graph.enabled=True`)
with the graph the config names (`libai_ext.engine.GraphBase`): stock is LiBai's
`DefaultTrainer` with that graph, launched, like every variant, through this project's
train_net (benchmarks/timed_train_net.py).

Reports per variant: rank 0's median step time (after `--warmup` iterations), its spread over
the repeats and its ratios to stock and to the fast path that loads on stage 0 only; the CPU
time of a step summed over all ranks (each rank's median) and the cores that keeps busy (CPU /
step time): with more ranks than cores it stays near the core count (1.9-2.1 on this 2-core
host, OneFlow's threads keep busy while a rank waits), and a lower figure means something else
took the cores, so that run's times are suspect.  Per stage: the median load time
(`next(loader)`: reading + augmentation), on stage 0 `get_batch` (data time minus load: mixup
and making the batch global), and LiBai's data time (load + `get_batch`, which outside stage 0
includes waiting for stage 0's batch), with ratios to stock.
`--baseline` runs each variant from another checkout too (interleaved in the same rotation) and adds
a table of this checkout's step time over the baseline's: the cost of a change, side by side.
Writes benchmarks/results/trainer_overhead.md (`--model gpt2`: trainer_overhead_gpt2.md).
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from libai_ext.testing import MultiRankError, launch  # noqa: E402
from report import header  # noqa: E402  benchmarks/report.py (scripts run from benchmarks/)

LAYOUTS = {1: (1, 1, 1), 2: (1, 1, 2), 4: (2, 1, 2), 8: (2, 2, 2)}
# "consistent" variants: the pairing fix alone (train.randomness="fast": LiBai's sampler, OneFlow's init, local
# mixup); "layout_invariant": the default, every piece of docs/layout_invariance.md on top.
VARIANTS = {
    "stock": ["train.trainer=libai.engine.DefaultTrainer"],
    "consistent": ["train.trainer=libai_ext.ConsistentBatchTrainer", "train.stage0_only_loading=False",
                   "train.randomness=fast"],
    "consistent+stage0-only": ["train.trainer=libai_ext.ConsistentBatchTrainer", "train.stage0_only_loading=True",
                               "train.randomness=fast"],
    "layout_invariant": ["train.trainer=libai_ext.ConsistentBatchTrainer", "train.stage0_only_loading=True",
                         "train.randomness=layout_invariant"],
}
# "step / fast" compares with the fast path that loads as the default does (stage 0 only).
FAST = "consistent+stage0-only"


MODELS = {
    "demo": lambda data: ["--config-file", os.path.join(ROOT, "configs", "demo_pipeline_cpu.py"),
                          f"dataloader.train.dataset.0.root.root={data}/digits"],
    "gpt2": lambda data: ["--config-file", os.path.join(ROOT, "configs", "libai_gpt2_cpu.py"),
                          f"text_data.root={data}/libai_text", "model.cfg.bias_dropout_fusion=False",
                          "model.cfg.scale_mask_softmax_fusion=False"],
    "vit": lambda data: ["--config-file", os.path.join(ROOT, "configs", "libai_vit_digits_cpu.py"),
                         f"dataloader.train.dataset.0.root.root={data}/digits"],
}
GRAPH = ["graph.enabled=True"]


BASELINE = " (baseline)"


def run(model, nproc, variant, iters, workdir, data, env=None, graph=False, device=None, timeout=900, root=ROOT):
    """One training run of ``variant`` (``root``: the checkout whose libai_ext, configs and timing script run)."""
    dp, tp, pp = LAYOUTS[nproc]
    output = os.path.join(workdir, f"{nproc}-{variant}".replace(BASELINE, "-baseline"))  # (a path Hydra takes)
    model_args = [arg.replace(ROOT, root) for arg in MODELS[model](data)]
    args = [*model_args, *VARIANTS[variant.replace(BASELINE, "")], *(GRAPH if graph else []),
            f"train.train_iter={iters}", "train.evaluation.enabled=False", "train.log_period=1000",
            f"train.output_dir={output}",
            f"train.dist.data_parallel_size={dp}", f"train.dist.tensor_parallel_size={tp}",
            f"train.dist.pipeline_parallel_size={pp}"]
    if root != ROOT:  # the baseline checkout's libai_ext first on the ranks' path
        env = dict(env or os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    launch(os.path.join(root, "benchmarks", "timed_train_net.py"), nproc, args, timeout=timeout,
           workdir=output + "-logs", env=env, device=device)
    timings = {}
    for rank in range(nproc):
        with open(os.path.join(output, f"timing_rank{rank}.json")) as f:
            timings[rank] = json.load(f)
    return timings


def stage_medians(timings, nproc, key, warmup):
    """{stage: median of `key` over its ranks and iterations}."""
    per_stage = nproc // LAYOUTS[nproc][2]
    return {stage: statistics.median(t for r in range(nproc) if r // per_stage == stage
                                     for t in timings[r][key][warmup:])
            for stage in range(LAYOUTS[nproc][2])}


def summarize(timings, nproc, warmup):
    """``(rank 0's step time, CPU time of a step summed over ranks, {key: per-stage medians})``."""
    step = statistics.median(timings[0]["step_times"][warmup:])
    cpu = sum(statistics.median(timings[rank]["cpu_times"][warmup:]) for rank in range(nproc))
    return step, cpu, {key: stage_medians(timings, nproc, key, warmup) for key in ("load_times", "data_times")}


def rotated(variants, repeat):
    """The variants in the order of this repeat: each repeat starts one later."""
    shift = repeat % len(variants)
    return variants[shift:] + variants[:shift]


def combine(runs):
    """One variant's repeats: ``(median step, steps, median CPU, {key: {stage: median}})``."""
    times = runs[0][2]
    return (statistics.median(step for step, _, _ in runs), [step for step, _, _ in runs],
            statistics.median(cpu for _, cpu, _ in runs),
            {key: {stage: statistics.median(t[key][stage] for _, _, t in runs) for stage in times[key]}
             for key in times})


def later_stages(by_stage):
    """Mean over the stages after the first; None with one stage."""
    values = [v for stage, v in by_stage.items() if stage > 0]
    return statistics.mean(values) if values else None


def ms(value, digits):
    return "-" if value is None else f"{1e3 * value:.{digits}f}"


def ratio(value, reference):
    return "-" if reference is None else f"{value / reference:.3f}"


def failure_reason(error):
    """The line of a failed run's log that says why (OneFlow's check, or the exception)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    for marker in ("Check failed", "Error:", "Error"):
        found = [line for line in lines if marker in line and "MultiRankError" not in line]
        if found:
            return found[0][:200]
    return lines[0][:200] if lines else type(error).__name__


def table(results, failures=None):
    lines = ["| ranks (dp,tp,pp) | trainer | step time (s) | min-max over repeats | step / stock | step / fast "
             "| CPU s per step, all ranks | CPU / stock | cores busy "
             "| load ms, stage 0 | get_batch ms, stage 0 | load ms, other stages | other stages' load / stock "
             "| data_time ms, other stages | other stages' data_time / stock |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (nproc, variant), reason in sorted((failures or {}).items()):
        lines.append(f"| {nproc} {LAYOUTS[nproc]} | {variant} | failed: {reason} |" + " - |" * 12)
    for nproc, by_variant in results.items():
        stock_step, _, stock_cpu, stock = by_variant.get("stock", (None, None, None, None))
        fast_step = by_variant[FAST][0] if FAST in by_variant else None
        for variant, (step, steps, cpu, times) in by_variant.items():
            load, data = later_stages(times["load_times"]), later_stages(times["data_times"])
            stock_load = later_stages(stock["load_times"]) if stock and load is not None else None
            stock_data = later_stages(stock["data_times"]) if stock and data is not None else None
            lines.append(
                f"| {nproc} {LAYOUTS[nproc]} | {variant} | {step:.3f} | {min(steps):.3f}-{max(steps):.3f} "
                f"| {ratio(step, stock_step)} | {ratio(step, fast_step)} "
                f"| {cpu:.2f} | {ratio(cpu, stock_cpu)} | {cpu / step:.2f} "
                f"| {1e3 * times['load_times'][0]:.2f} "
                f"| {1e3 * (times['data_times'][0] - times['load_times'][0]):.2f} | {ms(load, 3)} "
                f"| {ratio(load, stock_load)} | {ms(data, 2)} | {ratio(data, stock_data)} |")
    return "\n".join(lines)


def baseline_table(results, paired):
    """This checkout against ``--baseline``, per variant: median steps and the ratio of each repeat's pair."""
    lines = ["| ranks (dp,tp,pp) | trainer | step time (s) | baseline step time (s) | step / baseline "
             "| per-repeat ratios |", "|---|---|---|---|---|---|"]
    for nproc, by_variant in results.items():
        for variant, (step, _, _, _) in by_variant.items():
            if variant.endswith(BASELINE) or variant + BASELINE not in by_variant:  # (a failed side has no ratio)
                continue
            base = by_variant[variant + BASELINE][0]
            ratios = ", ".join(f"{r:.3f}" for r in paired[nproc][variant])
            lines.append(f"| {nproc} {LAYOUTS[nproc]} | {variant} | {step:.3f} | {base:.3f} | {step / base:.3f} "
                         f"| {ratios} |")
    return "\n".join(lines)


def title(args):
    """What a results file of this script holds, e.g. 'Whole training step, gpt2 on 8 ranks: stock vs
    layout_invariant, 10 repeats'."""
    ranks = " and ".join(", ".join(map(str, args.ranks)).rsplit(", ", 1))
    variants = "every trainer" if list(args.variants) == list(VARIANTS) else " vs ".join(args.variants)
    repeats = f"{args.repeats} repeat{'s' * (args.repeats > 1)}"
    mode = ", graph mode" if args.graph else ""
    against = " against a baseline checkout" if args.baseline else ""
    return f"Whole training step{mode}, {args.model} on {ranks} ranks: {variants}{against}, {repeats}"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--model", choices=sorted(MODELS), default="demo")
    parser.add_argument("--graph", action="store_true",
                        help="every variant in graph mode with the config's graph (stock: DefaultTrainer with it)")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS),
                        help="default: all four (ratios to a variant left out read '-')")
    parser.add_argument("--out", default=None,
                        help="default: benchmarks/results/trainer_overhead.md (demo), trainer_overhead_<model>.md")
    parser.add_argument("--baseline", default=None, metavar="CHECKOUT",
                        help="also run every variant from this other checkout of the project (e.g. the commit a "
                             "change starts from: git worktree add /tmp/base <commit>), interleaved, and add a "
                             "table of the ratios (needs its compiled host kernel: `make setup` there, or copy "
                             "libai_ext/random/_counter_kernel*.so)")
    args = parser.parse_args()
    suffix = ("" if args.model == "demo" else f"_{args.model}") + ("_graph" if args.graph else "")
    args.out = args.out or os.path.join(ROOT, "benchmarks", "results", f"trainer_overhead{suffix}.md")
    workdir = tempfile.mkdtemp(prefix="overhead-")
    results, failures, paired = {}, {}, {}
    variants = list(args.variants)
    if args.baseline:
        variants = [v for variant in variants for v in (variant, variant + BASELINE)]
    for nproc in args.ranks:
        samples = {variant: [] for variant in variants}
        for repeat in range(args.repeats):
            for variant in rotated(variants, repeat):  # interleaved, so drift hits every variant alike
                if (nproc, variant) in failures:
                    continue
                root = os.path.abspath(args.baseline) if variant.endswith(BASELINE) else ROOT
                try:
                    timings = run(args.model, nproc, variant, args.iters, os.path.join(workdir, f"r{repeat}"),
                                  workdir, graph=args.graph, root=root)
                except MultiRankError as error:  # a layout OneFlow cannot run: a row says so, the rest goes on
                    failures[(nproc, variant)] = failure_reason(error)
                    print(f"{nproc} ranks, {variant}, repeat {repeat}: failed: {failures[(nproc, variant)]}",
                          flush=True)
                    continue
                samples[variant].append(summarize(timings, nproc, args.warmup))
                step, cpu, _ = samples[variant][-1]
                print(f"{nproc} ranks, {variant}, repeat {repeat}: step {step:.3f} s, CPU {cpu:.2f} s", flush=True)
        results[nproc] = {variant: combine(runs) for variant, runs in samples.items() if runs}
        paired[nproc] = {v: [a[0] / b[0] for a, b in zip(samples[v], samples[v + BASELINE])]
                         for v in args.variants} if args.baseline else {}
    text = table(results, failures)
    if args.baseline:
        text += "\n\nThis checkout against " + args.baseline + ":\n\n" + baseline_table(results, paired)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(header(title(args)) + setting(args) + "\n\n" + text + "\n")
    print(setting(args))
    print(text)


def setting(args):
    """What was compared, in words (the output says which graph stock ran)."""
    from libai.version import __version__ as libai_version

    mode = ("graph mode (graph.enabled=True): every variant, stock included, trains with the graph the config "
            "names (libai_ext.engine.GraphBase); stock is LiBai's DefaultTrainer with it, launched through this "
            "project's train_net (benchmarks/timed_train_net.py)" if args.graph else "eager mode")
    return f"LiBai {libai_version}, {mode}."


if __name__ == "__main__":
    main()
