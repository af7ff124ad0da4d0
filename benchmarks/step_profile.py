"""Where a training step's time goes, per variant: Python's profiler on every rank, side by side.

    .venv/bin/python benchmarks/step_profile.py [--model gpt2] [--ranks 8] [--iters 30] [--warmup 10]
        [--variants consistent+stage0-only layout_invariant] [--graph] [--top 8] [--out FILE]

Runs the variants of ``benchmarks/trainer_overhead.py`` one after the other (same model, layout and
options), each rank profiling its steps after ``--warmup`` (``benchmarks/timed_train_net.py`` with
``PROFILE_FROM``), and reports for rank 0 (stage 0) and the first rank of the last stage the
milliseconds per step spent in: the whole step, named parts (the stochastic layers, the fast
path's generator re-seeding, ``get_batch``, backward, waiting for OneFlow's queued work when the
loss is read), and the functions with the most time of their own.  The profiler slows Python
code, so the parts written in Python (the plugin's) are, if anything, over-counted.  With ``--graph``
(graph mode, as ``benchmarks/trainer_overhead.py --graph``) the step is mostly the graph's own run, which
Python's profiler sees as one call: the report adds the graph's ops on each shown rank, counted by type,
and how many more the last variant has than the first.
Writes benchmarks/results/step_profile_<model>_<ranks>ranks[_graph].md.
"""
import json
import argparse
import os
import pstats
import statistics
import sys
import tempfile

import trainer_overhead  # benchmarks/trainer_overhead.py (scripts run from benchmarks/)
from report import publish

ROOT = trainer_overhead.ROOT

# (label, file suffix, function): cumulative time, calls below included.
NAMED = [
    ("whole step (`run_step`)", "libai_ext/engine/trainer.py", "run_step"),
    ("stochastic layers (`Dropout`, `DropPath`)", "libai_ext/random/layers/stochastic.py", "drop"),
    ("of which the fast path's generator re-seeding", "libai_ext/random/shard_rng.py", "shard_generator"),
    ("`get_batch` (stage 0: batch made global and sent)", "libai_ext/engine/trainer.py", "get_batch"),
    ("backward", "~", "<built-in method oneflow._oneflow_internal.autograd.backward>"),
    ("waiting for queued work (`Tensor.numpy` of the loss)", "~", "<method 'to_numpy' of 'Tensor' objects>"),
    ("graph call (`GraphBase.__call__`: its run, the step input)", "libai_ext/engine/graph.py", "__call__"),
    ("of which the graph's step input", "libai_ext/random/layers/graph_calls.py", "step_input"),
]


def label(key):
    filename, line, function = key
    if filename == "~":
        return function
    for prefix in (os.path.join(ROOT, ""), "site-packages/"):
        if prefix in filename:
            filename = filename.split(prefix, 1)[1]
    return f"{filename}:{line}({function})"


def named_ms(stats, steps):
    """{label: ms per step} of ``NAMED`` (0 where a variant never calls it)."""
    out = {}
    for name, suffix, function in NAMED:
        total = sum(ct for (filename, _, fn), (_, _, _, ct, _) in stats.items()
                    if fn == function and (filename == suffix if suffix == "~" else filename.endswith(suffix)))
        out[name] = 1e3 * total / steps
    return out


def own_ms(stats, steps):
    """{function: ms per step of its own time}."""
    return {label(key): 1e3 * tt / steps for key, (_, _, tt, _, _) in stats.items()}


def profile(model, nproc, variant, iters, warmup, workdir, graph=False):
    """{rank: (named ms per step, own ms per step, graph ops by type or None)} and rank 0's median step time."""
    timings = trainer_overhead.run(model, nproc, variant, iters, workdir, workdir,
                                   env={**os.environ, "PROFILE_FROM": str(warmup + 1)}, graph=graph)
    output = os.path.join(workdir, f"{nproc}-{variant}")
    steps = iters - warmup
    per_rank = {}
    for rank in shown_ranks(nproc):
        stats = pstats.Stats(os.path.join(output, f"profile_rank{rank}.out")).stats
        ops = None
        if graph:
            with open(os.path.join(output, f"graph_ops_rank{rank}.json")) as f:
                ops = json.load(f)
        per_rank[rank] = (named_ms(stats, steps), own_ms(stats, steps), ops)
    return per_rank, statistics.median(timings[0]["step_times"][warmup:])


def ops_table(results, variants, rank, top=12):
    """The graph's ops on ``rank`` per variant: the total, then the types the last variant adds most of."""
    counts = [results[v][0][rank][2] for v in variants]
    lines = ["| graph ops | " + " | ".join(variants) + f" | {variants[-1]} - {variants[0]} |",
             "|---|" + "---|" * (len(variants) + 1),
             "| all | " + " | ".join(str(sum(c.values())) for c in counts)
             + f" | {sum(counts[-1].values()) - sum(counts[0].values())} |"]
    kinds = sorted(set().union(*counts), key=lambda k: -(counts[-1].get(k, 0) - counts[0].get(k, 0)))[:top]
    for kind in kinds:
        lines.append(f"| `{kind}` | " + " | ".join(str(c.get(kind, 0)) for c in counts)
                     + f" | {counts[-1].get(kind, 0) - counts[0].get(kind, 0)} |")
    return "\n".join(lines)


def shown_ranks(nproc):
    """Rank 0 (stage 0) and the first rank of the last stage."""
    pp = trainer_overhead.LAYOUTS[nproc][2]
    return sorted({0, nproc - nproc // pp})


def table(results, variants, rank, top):
    head = "| ms per step | " + " | ".join(variants) + " |"
    lines = [head, "|---|" + "---|" * len(variants)]
    for name, _, _ in NAMED:
        lines.append(f"| {name} | " + " | ".join(f"{results[v][0][rank][0][name]:.1f}" for v in variants) + " |")
    leaders = set()
    for v in variants:
        own = results[v][0][rank][1]
        leaders |= set(sorted(own, key=own.get, reverse=True)[:top])
    first = results[variants[0]][0][rank][1]
    for name in sorted(leaders, key=lambda n: -first.get(n, 0.0)):
        cells = [f"{results[v][0][rank][1].get(name, 0.0):.1f}" for v in variants]
        lines.append(f"| own: `{name}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=sorted(trainer_overhead.MODELS), default="gpt2")
    parser.add_argument("--ranks", type=int, choices=sorted(trainer_overhead.LAYOUTS), default=8)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--variants", nargs="+", choices=list(trainer_overhead.VARIANTS),
                        default=[trainer_overhead.FAST, "layout_invariant"])
    parser.add_argument("--top", type=int, default=8, help="functions shown per variant, by their own time")
    parser.add_argument("--graph", action="store_true", help="graph mode (the config's graph, every variant)")
    parser.add_argument("--out", default=None, help="default: benchmarks/results/step_profile_<model>_<ranks>ranks.md")
    args = parser.parse_args()
    if args.iters <= args.warmup:
        parser.error(f"--iters ({args.iters}) must exceed --warmup ({args.warmup}): nothing would be profiled")
    suffix = "_graph" if args.graph else ""
    out = args.out or os.path.join(ROOT, "benchmarks", "results",
                                   f"step_profile_{args.model}_{args.ranks}ranks{suffix}.md")
    workdir = tempfile.mkdtemp(prefix="step-profile-")
    results = {v: profile(args.model, args.ranks, v, args.iters, args.warmup, workdir, args.graph)
               for v in args.variants}
    layout = trainer_overhead.LAYOUTS[args.ranks]
    text = [f"{args.ranks} ranks {layout} (dp, tp, pp), {args.iters - args.warmup} profiled steps per rank. "
            "Step time of rank 0 with the profiler on (median): "
            + ", ".join(f"{v} {results[v][1]:.3f} s" for v in args.variants) + "."]
    for rank in shown_ranks(args.ranks):
        stage = rank * layout[2] // args.ranks
        text += ["", f"Rank {rank} (stage {stage}):", "", table(results, args.variants, rank, args.top)]
        if args.graph:
            text += ["", ops_table(results, args.variants, rank)]
    os.makedirs(os.path.dirname(out), exist_ok=True)
    mode = ", graph mode" if args.graph else ""
    publish("\n".join(text) + "\n", out,
            title=f"Where a training step goes: {args.model} on {args.ranks} ranks{mode}, every rank profiled")


if __name__ == "__main__":
    sys.exit(main())
