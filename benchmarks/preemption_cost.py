"""What preemption costs a step: the ranks' agreement (one all-gather of a flag) against the whole step.

    .venv/bin/python benchmarks/preemption_cost.py [--ranks 2] [--iters 60] [--warmup 10] [--model demo|gpt2]
        [--out FILE]

Trains the demo (configs/demo_pipeline_cpu.py, pp2 on 2 ranks, dp2 x pp2 on 4, dp2 x tp2 x pp2 on 8)
or LiBai's GPT-2 (``--model gpt2``, as ``benchmarks/trainer_overhead.py`` runs it) with
``ConsistentBatchTrainer`` and preemption on, as any run has it.  Every rank times, in the same
steps, the preemption hook's ``after_step`` (the agreement: is any rank signalled?) and the whole
step, from the hook's ``before_step`` to the end of its ``after_step``; the report gives each
rank's medians after ``--warmup`` steps and their ratio.  Side by side in one run: the ratio holds
on a busy host, the milliseconds do not.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
RECORD_ENV = "PREEMPTION_COST_RECORD"
LAYOUTS = {2: (1, 1, 2), 4: (2, 1, 2), 8: (2, 2, 2)}


def rank_main(argv):
    """On each rank: tools/train_net.py with the preemption hook timed."""
    from libai_ext.cli.train_net import main
    from libai_ext.engine.preemption import PreemptionHook

    times = []
    before, after = PreemptionHook.before_step, PreemptionHook.after_step

    def timed_before(hook):
        hook._step_start = time.perf_counter()
        before(hook)

    def timed_after(hook):
        start = time.perf_counter()
        after(hook)
        end = time.perf_counter()
        times.append((hook.trainer.iter, (end - start) * 1e3, (end - hook._step_start) * 1e3))
        with open(f"{os.environ[RECORD_ENV]}.rank{os.environ.get('RANK', '0')}", "w") as f:
            json.dump(times, f)

    PreemptionHook.before_step, PreemptionHook.after_step = timed_before, timed_after
    return main(argv)


def run(model, nproc, iters, workdir):
    from libai_ext.testing import launch

    dp, tp, pp = LAYOUTS[nproc]
    data = os.path.join(workdir, "data")
    config = {"demo": ["--config-file", os.path.join(ROOT, "configs", "demo_pipeline_cpu.py"),
                       f"dataloader.train.dataset.0.root.root={data}/digits"],
              "gpt2": ["--config-file", os.path.join(ROOT, "configs", "libai_gpt2_cpu.py"),
                       f"text_data.root={data}/libai_text", "model.cfg.bias_dropout_fusion=False",
                       "model.cfg.scale_mask_softmax_fusion=False"]}[model]
    record = os.path.join(workdir, "times")
    args = [*config, f"train.output_dir={workdir}/run", f"train.train_iter={iters}", "train.evaluation.enabled=False",
            f"train.checkpointer.period={iters * 10}", f"train.dist.data_parallel_size={dp}",
            f"train.dist.tensor_parallel_size={tp}", f"train.dist.pipeline_parallel_size={pp}"]
    launch(os.path.abspath(__file__), nproc, args, timeout=3600, env=dict(os.environ, **{RECORD_ENV: record}),
           workdir=os.path.join(workdir, "logs"))
    by_rank = {}
    for rank in range(nproc):
        with open(f"{record}.rank{rank}") as f:
            by_rank[rank] = json.load(f)
    return by_rank


def report(by_rank, warmup, args, load):
    lines = [f"# Preemption's agreement against the step ({args.model}, {args.ranks} ranks)", "",
             f"`{' '.join(['.venv/bin/python benchmarks/preemption_cost.py'] + sys.argv[1:])}`; "
             f"load average at the start {load}", "",
             "| rank | steps | step (median ms) | agreement (median ms) | agreement / step |", "|---|---|---|---|---|"]
    for rank, times in sorted(by_rank.items()):
        kept = [t for t in times if t[0] >= warmup]
        step = statistics.median(t[2] for t in kept)
        agreement = statistics.median(t[1] for t in kept)
        lines.append(f"| {rank} | {len(kept)} | {step:.1f} | {agreement:.2f} | {agreement / step:.4f} |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=2, choices=sorted(LAYOUTS))
    parser.add_argument("--iters", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--model", default="demo", choices=["demo", "gpt2"])
    parser.add_argument("--out", help="also write the markdown report here")
    args = parser.parse_args()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="preemption-cost-") as workdir:
        by_rank = run(args.model, args.ranks, args.iters, workdir)
    from report import publish

    publish(report(by_rank, args.warmup, args, load), args.out)


if __name__ == "__main__":
    if RECORD_ENV in os.environ:
        sys.exit(rank_main(sys.argv[1:]))
    main()
