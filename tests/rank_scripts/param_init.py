"""On every rank: build configs/swin_digits_cpu.py's model as a trainer does, report its initial weights.

Three builds, each from ``seed_from_config`` (train.seed of the config): ``ConsistentBatchTrainer.build_model``
with train.randomness "layout_invariant" and "fast", and LiBai's ``DefaultTrainer.build_model`` (stock).
After each, every rank writes one record: for every parameter and buffer whose placement holds
it, a SHA-1 of the whole global value (gathered) and its mean / std, so that layouts can be
compared bit for bit, and the build time.
"""
import hashlib
import os
import time

import oneflow as flow
from libai.config import LazyConfig
from libai.engine import DefaultTrainer

from common import layout_parser, run_or_die, setup_layout
from libai_ext import ConsistentBatchTrainer, seed_from_config
from libai_ext.random.param_init import named_tensors
from libai.utils import distributed as dist
from libai_ext.testing import ranks_device, write_rank_result

BUILDS = (("layout_invariant", ConsistentBatchTrainer, "layout_invariant"),
          ("fast", ConsistentBatchTrainer, "fast"),
          ("stock", DefaultTrainer, "layout_invariant"))
CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "swin_digits_cpu.py")


def full_value(tensor):
    """The whole global tensor as numpy on the ranks of its placement (None elsewhere)."""
    tensor = tensor.detach()
    whole = tensor.to_global(sbp=[flow.sbp.broadcast] * len(tensor.sbp))
    return whole.to_local().numpy() if flow.env.get_rank() in tensor.placement.ranks.flatten().tolist() else None


def main():
    setup_layout(layout_parser().parse_args())
    util = dist.get_dist_util()
    if hasattr(util, "set_device_type"):  # LiBai main: build_model's placements follow it (default "cuda")
        util.set_device_type(ranks_device())
    for build, trainer, randomness in BUILDS:
        cfg = LazyConfig.load(CONFIG)
        cfg.train.randomness = randomness
        seed_from_config(cfg)
        start = time.perf_counter()
        model = trainer.build_model(cfg)
        seconds = time.perf_counter() - start
        weights = {}
        for name, tensor in named_tensors(model):
            value = full_value(tensor)
            if value is not None:
                weights[name] = [hashlib.sha1(value.tobytes()).hexdigest(), float(value.mean()), float(value.std())]
        write_rank_result(build=build, weights=weights, build_s=seconds)


if __name__ == "__main__":
    run_or_die(main)
