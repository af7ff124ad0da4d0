"""Step time of LiBai's own models in this project's CPU configs, ConsistentBatchTrainer, 1 rank.

    .venv/bin/python benchmarks/libai_zoo_step_time.py [--iters 20] [--warmup 5] [--out FILE]

Trains configs/libai_{gpt2,bert,vit_digits,swin_digits}_cpu.py (every dropout and drop-path on, no
evaluation) through benchmarks/timed_train_net.py, one after another on 1 rank, and reports the
median step time after the warm-up iterations.  The text data are built first if needed (in
./data/libai_text, as the configs do).  Run it with each venv to compare the LiBai lines.
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

from report import publish  # noqa: E402

CONFIGS = ("libai_gpt2_cpu", "libai_bert_cpu", "libai_vit_digits_cpu", "libai_swin_digits_cpu")


def step_times(name, iters, workdir):
    output = os.path.join(workdir, name)
    args = ["--config-file", os.path.join(ROOT, "configs", f"{name}.py"), f"train.train_iter={iters}",
            "train.evaluation.enabled=False", "train.log_period=5", f"train.output_dir={output}"]
    launch(os.path.join(ROOT, "benchmarks", "timed_train_net.py"), 1, args, timeout=1200,
           workdir=os.path.join(workdir, f"{name}-logs"))
    with open(os.path.join(output, "timing_rank0.json")) as f:
        return json.load(f)["step_times"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--out", default=None, help="also write the markdown table here")
    args = parser.parse_args()
    from libai.version import __version__ as libai_version

    workdir = tempfile.mkdtemp(prefix="zoo-steps-")
    lines = [f"LiBai {libai_version}, 1 rank, {args.iters} iterations, median after {args.warmup}:", "",
             "| config | median step (s) | min (s) | max (s) |", "|---|---|---|---|"]
    for name in CONFIGS:
        times = step_times(name, args.iters, workdir)[args.warmup:]
        lines.append(f"| {name} | {statistics.median(times):.3f} | {min(times):.3f} | {max(times):.3f} |")
        print(lines[-1], flush=True)
    publish("\n".join(lines) + "\n", args.out, title="LiBai's own models on 1 CPU rank: step time")


if __name__ == "__main__":
    main()
