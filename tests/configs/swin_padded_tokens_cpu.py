"""configs/demo_swin_digits_cpu.py with a loss averaged over a micro-batch's unmasked tokens.

LiBai main's LLM projects (Llama, ChatGLM) average ``cross_entropy(..., ignore_index=0)`` over the
unmasked tokens of a micro-batch, so which samples share a micro-batch changes the gradient. Here the
tokens are the Swin's last-stage tokens (2 x 2 of them), each classified by the head, with synthetic
padding: sample ``i`` keeps its first ``1 + c_i % 4`` tokens, ``c_i`` the top class of its (mixed)
label row, and the loss is the mean of the kept tokens' cross entropy over the micro-batch.
"""
import os

import oneflow as flow
from libai.config import LazyConfig
from libai.utils import distributed as dist
from oneflow import nn

from libai_ext.models.swin import SwinTransformer

_demo = LazyConfig.load(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs",
                                     "demo_swin_digits_cpu.py"))
train, optim, graph, dataloader, model = _demo.train, _demo.optim, _demo.graph, _demo.dataloader, _demo.model


class PaddedTokenLoss(nn.Module):
    """Soft-label cross entropy per token ``[B, T]``, averaged over the micro-batch's kept tokens."""

    def forward(self, logits, target):
        target = target.to_global(placement=logits.placement)
        tokens = logits.shape[1]
        kept = target.argmax(dim=-1) % tokens + 1
        positions = flow.arange(tokens, placement=logits.placement, sbp=[flow.sbp.broadcast] * len(logits.sbp))
        mask = (positions.unsqueeze(0) < kept.unsqueeze(1)).to(flow.float32)
        per_token = -(target.unsqueeze(1) * flow.nn.functional.log_softmax(logits, dim=-1)).sum(dim=-1)
        return (per_token * mask).sum() / mask.sum()


class PaddedTokenSwin(SwinTransformer):
    """The demo's Swin (no absolute position embedding) trained on its tokens' logits."""

    def forward(self, images, labels=None):
        if labels is None or not self.training:
            return super().forward(images)
        x = self.pos_drop(self.patch_embed(images))
        for layer in self.layers:
            x = layer(x)
        tokens = self.norm(x.to_global(placement=dist.get_layer_placement(-1)))
        return {"losses": PaddedTokenLoss()(self.head(tokens), labels)}


model._target_ = PaddedTokenSwin
train.output_dir = "./output/swin_padded_tokens_cpu"
