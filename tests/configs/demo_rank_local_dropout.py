"""A planted fault for tools/check_equivalence.py: configs/demo_pipeline_cpu.py with a dropout
seeded per rank after every mixer block.

``RankLocalDropout`` drops each rank's local shard with OneFlow's dropout on a local tensor,
which draws from that rank's own generator (what code that works on ``to_local()`` shards
does).  With ``train.seed_scope=rank`` each rank has its own stream, so under pp2 the blocks on
stage 1 (rank 1) draw other masks than the same blocks on 1 rank (where rank 0 draws them all).
OneFlow's ``flow.nn.Dropout`` on a *global* tensor would not show this: measured on 1 rank vs
pp2 with ``train.seed_scope=rank``, its masks were identical.
"""
import os

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
        local = flow.nn.functional.dropout(x.to_local(), p=self.rate, training=self.training)
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
