"""A small MLP-Mixer image classifier split over pipeline stages with LiBai layers.

The demo model: quick on CPU, but built like a real LiBai model so that every parallel path is exercised.  Patch
embedding on stage 0; block ``i`` at ``layer_idx=i``, placed by LiBai's layer table (set
``train.dist.pipeline_num_layers = depth``: uniform on 0.1.1, middle stages heavier on main with pp >= 4); head and
loss on the last stage; channel MLPs tensor parallel (``col`` then ``row`` Linear).
"""
import oneflow as flow
from libai.config import configurable
from libai.layers import LayerNorm, Linear
from libai.utils import distributed as dist
from oneflow import nn

from .losses import SoftTargetCrossEntropy


def to_stage_of(x, layer_idx):
    return x.to_global(placement=dist.get_layer_placement(layer_idx))


class ChannelMLP(nn.Module):
    def __init__(self, dim, hidden, layer_idx):
        super().__init__()
        self.fc1 = Linear(dim, hidden, parallel="col", layer_idx=layer_idx)
        self.fc2 = Linear(hidden, dim, parallel="row", layer_idx=layer_idx)

    def forward(self, x):
        return self.fc2(flow.nn.functional.gelu(self.fc1(x)))


class MixerBlock(nn.Module):
    def __init__(self, num_tokens, dim, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.token_norm = LayerNorm(dim, layer_idx=layer_idx)
        self.token_mix = Linear(num_tokens, num_tokens, parallel="data", layer_idx=layer_idx)
        self.channel_norm = LayerNorm(dim, layer_idx=layer_idx)
        self.channel_mix = ChannelMLP(dim, 2 * dim, layer_idx)

    def forward(self, x):
        x = to_stage_of(x, self.layer_idx)
        mixed_tokens = self.token_mix(self.token_norm(x).transpose(1, 2)).transpose(1, 2)
        x = x + mixed_tokens
        return x + self.channel_mix(self.channel_norm(x))


class PipelineMixer(nn.Module):
    @configurable
    def __init__(self, img_size=32, patch_size=4, in_chans=3, embed_dim=32, depth=4, num_classes=10):
        super().__init__()
        if img_size % patch_size:
            raise ValueError(f"img_size={img_size} is not a multiple of patch_size={patch_size}")
        self.patch_size = patch_size
        num_tokens = (img_size // patch_size) ** 2
        self.embed = Linear(in_chans * patch_size ** 2, embed_dim, parallel="data", layer_idx=0)
        self.blocks = nn.ModuleList([MixerBlock(num_tokens, embed_dim, i) for i in range(depth)])
        self.norm = LayerNorm(embed_dim, layer_idx=-1)
        self.head = Linear(embed_dim, num_classes, parallel="data", layer_idx=-1)
        self.loss_func = SoftTargetCrossEntropy()

    @classmethod
    def from_config(cls, cfg):
        keys = ("img_size", "patch_size", "in_chans", "embed_dim", "depth", "num_classes")
        return {k: cfg[k] for k in keys}

    def patchify(self, images):
        b, c, h, w = images.shape
        p = self.patch_size
        x = images.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5)
        return x.reshape(b, (h // p) * (w // p), c * p * p)

    def forward(self, images, labels=None):
        x = self.embed(self.patchify(images))
        for block in self.blocks:
            x = block(x)
        x = to_stage_of(x, -1)
        logits = self.head(self.norm(x).mean(dim=1))
        if labels is not None and self.training:
            return {"losses": self.loss_func(logits, labels)}
        return {"prediction_scores": logits}
