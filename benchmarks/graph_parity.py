"""Graph vs eager: per-iteration raw losses, same seed and weights, in both modes.

    .venv/bin/python benchmarks/graph_parity.py [--iters 10]            # demo mixer, pp2
    .venv/bin/python benchmarks/graph_parity.py --swin-dropout [--iters 10]

Runs tests/rank_scripts/graph_parity.py once (no random crop, no mixup in any mode).

* default: ``configs/demo_pipeline_cpu.py`` (no dropout) on 2 ranks (pp2), modes eager, graph,
  eager_acc2, graph_acc2: prints the largest absolute loss difference between graph and eager
  mode, and between one graph step with ``num_accumulation_steps=2`` and the mean of two eager
  micro-batches;
* ``--swin-dropout``: ``configs/demo_swin_digits_cpu.py`` on 1 rank with dropout 0.1, attention
  dropout 0.1, drop-path 0.2 and ``train.randomness=layout_invariant`` (the target: graph mode
  with dropout on matches eager within 1e-4 over 10 iterations on 1 rank), modes eager and graph:
  prints the largest relative loss difference.
"""
import argparse
import os
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from libai_ext.testing import launch  # noqa: E402

DEMO_MODES = ["eager", "graph", "eager_acc2", "graph_acc2"]
SWIN_DROPOUT = ["model.drop_rate=0.1", "model.attn_drop_rate=0.1", "model.drop_path_rate=0.2",
                "train.randomness=layout_invariant"]


def run_modes(config, nproc, modes, iters, overrides=()):
    work = tempfile.mkdtemp(prefix="graph-parity-")
    result = launch(os.path.join(ROOT, "tests", "rank_scripts", "graph_parity.py"), nproc,
                    ["--config", os.path.join(ROOT, "configs", config), "--data", f"{work}/data",
                     "--output", f"{work}/out", "--iters", iters, "--modes", ",".join(modes), *overrides],
                    timeout=900, workdir=f"{work}/logs")
    losses = {r["mode"]: np.array(r["losses"]) for r in result.records(0)}
    missing = [m for m in modes if m not in losses]
    if missing:
        sys.exit(f"rank 0 reported no losses for {missing}; logs in {work}/logs")
    return losses


def demo(iters):
    losses = run_modes("demo_pipeline_cpu.py", 2, DEMO_MODES, iters)
    plain = np.abs(losses["graph"] - losses["eager"]).max()
    acc2 = np.abs(losses["graph_acc2"] - losses["eager_acc2"].reshape(-1, 2).mean(axis=1)).max()
    print(f"iterations: {len(losses['eager'])}, eager loss range {np.ptp(losses['eager']):.4f}")
    print(f"max |graph - eager| loss: {plain:.3g}")
    print(f"max |graph acc2 - mean of 2 eager micro-batches| loss: {acc2:.3g}")


def swin_dropout(iters):
    losses = run_modes("demo_swin_digits_cpu.py", 1, ["eager", "graph"], iters, SWIN_DROPOUT)
    eager, graph = losses["eager"], losses["graph"]
    relative = np.abs(graph - eager) / np.abs(eager)
    print(f"demo_swin_digits_cpu, 1 rank, {' '.join(SWIN_DROPOUT)}")
    print(f"iterations: {len(eager)}, eager loss range {np.ptp(eager):.4f}")
    print("eager:", np.array2string(eager, precision=6))
    print("graph:", np.array2string(graph, precision=6))
    print(f"max relative |graph - eager| loss: {relative.max():.3g} (iteration {int(relative.argmax())})")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--swin-dropout", action="store_true", help="the Swin config with every dropout on, 1 rank")
    args = parser.parse_args()
    (swin_dropout if args.swin_dropout else demo)(args.iters)


if __name__ == "__main__":
    main()
