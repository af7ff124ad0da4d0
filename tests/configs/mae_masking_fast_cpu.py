"""tests/configs/mae_masking_cpu.py under ``train.randomness="fast"``: OneFlow's kernels seeded per shard,
reproducible on one layout, not the same across layouts (tests/test_random_op_layouts.py shows it)."""
import os

from libai.config import LazyConfig

_base = LazyConfig.load(os.path.join(os.path.dirname(os.path.abspath(__file__)), "mae_masking_cpu.py"))
train, optim, graph, dataloader, model = _base.train, _base.optim, _base.graph, _base.dataloader, _base.model
train.output_dir = "./output/mae_masking_fast_cpu"
train.randomness = "fast"
