"""A model that masks tokens at random in its forward, as MAE does, and samples through gumbel_softmax.

``MaskedTokenClassifier`` on the digits pipeline of configs/demo_pipeline_cpu.py (random crop,
mixup/cutmix, label smoothing): LiBai ``Linear`` patch embedding and position embedding on stage 0,
then MAE's masking pattern, written here from its description: per sample a noise vector
``flow.rand(N, L, sbp=x.sbp, placement=x.placement)``, ``argsort`` of it, the first ``L/2`` token
indices kept with ``gather``; LiBai ``TransformerLayer`` blocks (attention and output dropout,
drop-path, the fused bias-dropout) over the pipeline stages, a head on the last stage.  The loss
adds to the soft-target cross entropy a term through ``gumbel_softmax(logits)``.

Random draws inside the forward: the masking noise (``flow.rand``), the Gumbel noise, every
dropout and drop-path.  tests/test_random_op_layouts.py trains it on 1 rank, pp2, tp2, dp2 and
dp2 x pp2.  ``mae_masking_fast_cpu.py`` is the same under ``train.randomness="fast"``.
"""
import os

import oneflow as flow
from libai.config import LazyCall, LazyConfig
from libai.layers import LayerNorm, Linear, TransformerLayer
from libai.utils import distributed as dist
from oneflow import nn

from libai_ext.models.losses import SoftTargetCrossEntropy

_demo = LazyConfig.load(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs",
                                     "demo_pipeline_cpu.py"))
train, optim, graph, dataloader = _demo.train, _demo.optim, _demo.graph, _demo.dataloader


class MaskedTokenClassifier(nn.Module):
    def __init__(self, img_size=32, patch_size=8, in_chans=3, embed_dim=32, depth=2, num_heads=4, keep=0.5,
                 num_classes=10, drop=0.1):
        super().__init__()
        self.patch_size, self.keep = patch_size, keep
        tokens = (img_size // patch_size) ** 2
        self.embed = Linear(in_chans * patch_size ** 2, embed_dim, parallel="data", layer_idx=0)
        self.position = nn.Parameter(flow.zeros(1, tokens, embed_dim, placement=dist.get_layer_placement(0),
                                                sbp=dist.get_nd_sbp([flow.sbp.broadcast, flow.sbp.broadcast])))
        nn.init.trunc_normal_(self.position, std=0.02)
        self.blocks = nn.ModuleList([
            TransformerLayer(embed_dim, 2 * embed_dim, num_heads, attention_dropout_prob=drop,
                             output_dropout_prob=drop, drop_path_prob=drop * (i + 1) / depth,
                             bias_dropout_fusion=True, layer_idx=i)
            for i in range(depth)])
        self.norm = LayerNorm(embed_dim, layer_idx=-1)
        self.head = Linear(embed_dim, num_classes, parallel="data", layer_idx=-1)
        self.loss_func = SoftTargetCrossEntropy()

    def patchify(self, images):
        b, c, h, w = images.shape
        p = self.patch_size
        x = images.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5)
        return x.reshape(b, (h // p) * (w // p), c * p * p)

    def keep_random_tokens(self, x):
        """A random ``keep`` share of each sample's tokens (MAE's masking)."""
        n, length, dim = x.shape
        noise = flow.rand(n, length, sbp=x.sbp, placement=x.placement)
        kept = flow.argsort(noise, dim=1)[:, :int(length * self.keep)]
        return flow.gather(x, 1, kept.unsqueeze(-1).repeat(1, 1, dim))

    def forward(self, images, labels=None):
        x = self.embed(self.patchify(images)) + self.position
        if self.training:
            x = self.keep_random_tokens(x)
        for block in self.blocks:
            x = block(x.to_global(placement=dist.get_layer_placement(block.layer_idx)))
        x = x.to_global(placement=dist.get_layer_placement(-1))
        logits = self.head(self.norm(x).mean(dim=1))
        if labels is not None and self.training:
            sample = nn.functional.gumbel_softmax(logits, tau=1.0, dim=-1)
            return {"losses": self.loss_func(logits, labels) + ((sample - labels) ** 2).sum(dim=-1).mean()}
        return {"prediction_scores": logits}


DEPTH = 2
model = LazyCall(MaskedTokenClassifier)(depth=DEPTH)
train.output_dir = "./output/mae_masking_cpu"
train.dist.pipeline_parallel_size = 1
train.dist.pipeline_num_layers = DEPTH
train.seed = 11
