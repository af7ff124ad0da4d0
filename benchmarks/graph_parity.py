"""Graph vs eager: per-iteration losses of the demo model, same seed and weights, on 2 ranks (pp2).

    .venv/bin/python benchmarks/graph_parity.py [--iters 10]

Runs tests/rank_scripts/graph_parity.py once (modes eager, graph, eager_acc2, graph_acc2:
no random crop, no mixup, the demo has no dropout) and prints the largest absolute loss
difference between graph and eager mode, and between one graph step with
``num_accumulation_steps=2`` and the mean of two eager micro-batches.
"""
import argparse
import os
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from libai_ext.testing import launch  # noqa: E402

MODES = ["eager", "graph", "eager_acc2", "graph_acc2"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=10)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="graph-parity-")
    result = launch(os.path.join(ROOT, "tests", "rank_scripts", "graph_parity.py"), 2,
                    ["--config", os.path.join(ROOT, "configs", "demo_pipeline_cpu.py"), "--data", f"{work}/data",
                     "--output", f"{work}/out", "--iters", args.iters, "--modes", ",".join(MODES)],
                    timeout=900, workdir=f"{work}/logs")
    losses = {r["mode"]: np.array(r["losses"]) for r in result.records(0)}
    missing = [m for m in MODES if m not in losses]
    if missing:
        sys.exit(f"rank 0 reported no losses for {missing}; logs in {work}/logs")
    plain = np.abs(losses["graph"] - losses["eager"]).max()
    acc2 = np.abs(losses["graph_acc2"] - losses["eager_acc2"].reshape(-1, 2).mean(axis=1)).max()
    print(f"iterations: {len(losses['eager'])}, eager loss range {np.ptp(losses['eager']):.4f}")
    print(f"max |graph - eager| loss: {plain:.3g}")
    print(f"max |graph acc2 - mean of 2 eager micro-batches| loss: {acc2:.3g}")


if __name__ == "__main__":
    main()
