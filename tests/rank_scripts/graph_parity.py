"""On every rank: train the demo config in several modes (eager, graph, ...), each from the same seed.

Every run uses ConsistentBatchTrainer and records, on rank 0, the raw per-iteration
``total_loss`` (LiBai's metrics.json keeps a smoothed value) and a fingerprint of the
initial weights.  Randomness that differs by design between the modes is off: no random
crop (the deterministic test transform) and no mixup; the demo model has no dropout.
Graph runs also record which modules got a pipeline stage / activation checkpointing.

Usage: graph_parity.py --config CONFIG --data DIR --output DIR [--iters N]
       [--modes eager,graph,graph_ckpt] [key=value overrides...]
"""
import argparse
import os

import numpy as np
import oneflow as flow
from libai.config import LazyCall, LazyConfig
from libai.engine import default_setup
from libai.engine.hooks import HookBase
from libai.utils import distributed as dist

import libai_ext
from common import graph_module_settings, run_or_die
from libai_ext import ConsistentBatchTrainer, seed_from_config
from libai_ext.data import cifar_test_transform
from libai_ext.testing import write_rank_result


class RawLoss(HookBase):
    """Every iteration's un-smoothed total_loss (LiBai stores metrics on the main process only)."""

    def __init__(self):
        self.losses = []

    def after_step(self):
        if dist.is_main_process():
            self.losses.append(float(self.trainer.storage.history("total_loss").latest()))


def weight_fingerprint(model):
    """Sum and abs-sum of every full parameter (identical on every rank that holds it)."""
    replicated = dist.get_nd_sbp([flow.sbp.broadcast, flow.sbp.broadcast])
    total = np.zeros(2)
    for _, param in sorted(model.named_parameters()):
        full = param.to_global(sbp=replicated).to_global(placement=flow.placement("cpu", [0]))
        if flow.env.get_rank() == 0:
            value = full.to_local().numpy().astype(np.float64)
            total += [value.sum(), np.abs(value).sum()]
    return total.tolist()


# name: overrides.  The accumulation pair uses a constant LR: LiBai's eager trainer steps the
# LR scheduler once per micro-batch, its graph trainer once per optimizer step.
CONSTANT_LR = "train.scheduler.alpha=1.0"
MODES = {
    "eager": [],
    "graph": ["graph.enabled=True"],
    "graph_ckpt": ["graph.enabled=True", "train.activation_checkpoint.enabled=True"],
    "eager_acc2": ["train.num_accumulation_steps=2", CONSTANT_LR],
    "graph_acc2": ["graph.enabled=True", "train.num_accumulation_steps=2", CONSTANT_LR],
}


def build_config(args, mode):
    cfg = LazyConfig.load(args.config)
    cfg = LazyConfig.apply_overrides(cfg, [
        "train.log_period=1", "train.evaluation.enabled=False", "train.checkpointer.period=100000",
        "train.warmup_ratio=0", f"train.output_dir={os.path.join(args.output, mode)}",
        *MODES[mode], *args.overrides])
    # train_iter counts optimizer steps; LiBai's eager trainer multiplies it by the accumulation.
    cfg.train.train_iter = args.iters // (cfg.train.num_accumulation_steps or 1)
    # Deterministic data: same batches in both modes, nothing drawn per mode.
    root = LazyCall(libai_ext.data.ensure_digits_cifar)(root=args.data)
    cfg.dataloader.train.dataset[0].root = root
    cfg.dataloader.train.dataset[0].transform = LazyCall(cifar_test_transform)(img_size=32)
    cfg.dataloader.train.mixup_func = None
    cfg.dataloader.test[0].dataset.root = root
    return cfg


def run(args, mode):
    cfg = build_config(args, mode)
    default_setup(cfg, argparse.Namespace(resume=False, config_file=""))
    seed_from_config(cfg)
    trainer = ConsistentBatchTrainer(cfg)
    initial = weight_fingerprint(trainer.model)
    recorder = RawLoss()
    trainer.register_hooks([recorder])
    trainer.train()
    record = dict(mode=mode, losses=recorder.losses, initial_weights=initial)
    if cfg.graph.enabled:
        record["modules"] = graph_module_settings(trainer.graph_train)
        # Activation checkpointing shows in the compiled job as recomputed (cloned) forward ops.
        record["compiled_ops"] = len(trainer.graph_train._compiled_job_proto.net.op)
    if flow.env.get_rank() == 0:
        write_rank_result(**record)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--iters", type=int, default=10, help="micro-batches per run")
    parser.add_argument("--modes", default="eager,graph", help=f"comma-separated, from {sorted(MODES)}")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    libai_ext.apply_patches()
    for mode in args.modes.split(","):
        run(args, mode)


if __name__ == "__main__":
    run_or_die(main)
