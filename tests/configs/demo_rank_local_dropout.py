"""A planted fault for tools/check_equivalence.py: configs/demo_pipeline_cpu.py with a dropout
seeded per rank after every mixer block.

``RankLocalDropout`` drops each rank's local shard with a mask from numpy's global stream, which
belongs to the rank (code that works on ``to_local()`` shards with numpy does this; libai_ext keys
OneFlow's dropouts, and refuses OneFlow's other draws inside a forward, but cannot see numpy's).
With ``train.seed_scope=rank`` each rank has its own stream, so under pp2 the blocks on stage 1
(rank 1) draw other masks than the same blocks on 1 rank (where rank 0 draws them all).
"""
import os

import numpy as np

from libai.config import LazyCall, LazyConfig
import oneflow as flow
from oneflow import nn

from libai_ext.models.pipeline_mixer import PipelineMixer

_demo = LazyConfig.load(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs",
                                     "demo_pipeline_cpu.py"))
train, optim, graph, dataloader = _demo.train, _demo.optim, _demo.graph, _demo.dataloader


class RankLocalDropout(nn.Module):
    def __init__(self, rate):
        super().__init__()
        self.rate = rate

    def forward(self, x):
        local = x.to_local()
        if self.training:
            keep = np.random.rand(*local.shape) >= self.rate
            local = local * flow.tensor(keep.astype(np.float32) / (1.0 - self.rate), device=local.device)
        return local.to_global(placement=x.placement, sbp=x.sbp)


class BlockThenDropout(nn.Module):
    def __init__(self, block, rate):
        super().__init__()
        self.block = block
        self.drop = RankLocalDropout(rate)

    def forward(self, x):
        return self.drop(self.block(x))


def mixer_with_native_dropout(rate=0.1, **kwargs):
    model = PipelineMixer(**kwargs)
    model.blocks = nn.ModuleList([BlockThenDropout(block, rate) for block in model.blocks])
    return model


model = LazyCall(mixer_with_native_dropout)(rate=0.1, img_size=32, patch_size=4, embed_dim=32,
                                            depth=_demo.model.depth, num_classes=10)
