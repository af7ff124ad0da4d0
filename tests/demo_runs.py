"""The demo on 2 CPU ranks as the fault and preemption tests run it: arguments, output, losses.

``configs/demo_pipeline_cpu.py`` (augmentation and mixup on), ``ITERS`` iterations of micro-batch 16,
no evaluation unless asked, a loss record per iteration, on pp2 or dp2.  The uninterrupted run
of each layout is the reference every interrupted and resumed run is compared with, loss for
loss (``demo_reference`` in conftest.py runs it once per test session).
"""
import os

from libai_ext.testing import read_raw_losses

NPROC = 2
ITERS = 12
LAYOUTS = {"pp2": [], "dp2": ["train.dist.pipeline_parallel_size=1"]}


def checkpoint(iteration):
    return f"model_{iteration:07d}"


def train_args(repo_root, output, data, layout, period, iters=ITERS):
    return ["--config-file", os.path.join(repo_root, "configs", "demo_pipeline_cpu.py"),
            f"train.output_dir={output}", f"dataloader.train.dataset.0.root.root={data}",
            f"train.train_iter={iters}", f"train.checkpointer.period={period}", "train.evaluation.enabled=False",
            "train.log_period=1", "train.train_micro_batch_size=16", *LAYOUTS[layout]]


def train_net(repo_root):
    return os.path.join(repo_root, "tools", "train_net.py")


def new_losses(output, seen):
    """The loss records written since the file held ``seen`` of them."""
    path = os.path.join(output, "losses.jsonl")
    return read_raw_losses(output)[seen:] if os.path.exists(path) else []


def read_text(path):
    return path.read_text() if path.exists() else ""


def digits(tmp_path_factory):
    """The digits data folder shared by the session's demo runs (written by the first run)."""
    return tmp_path_factory.getbasetemp() / "digits"
