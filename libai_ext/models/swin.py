"""Swin Transformer that splits over data, tensor and pipeline parallelism (LiBai 0.1.1 layers).

Drop-in for ``libai.models.SwinTransformer`` (same constructor and ``from_config`` keys; labels may be class ids or
soft rows), except that every layer has a pipeline ``layer_idx`` and the attention/MLP weights are tensor-parallel.

qkv and fc1 are column-parallel, proj and fc2 row-parallel, so every Swin stage's ``num_heads`` must be divisible by
``train.dist.tensor_parallel_size``.  qkv's output is head-major (``[head][q|k|v][head_dim]``, as in
``libai.layers.MultiheadAttention``) so that a column shard holds whole heads: a timm/libai checkpoint's qkv weight
(``[q|k|v][head][head_dim]``) needs its columns permuted before loading.  Blocks spread evenly over the pipeline
stages: with ``train.dist.pipeline_num_layers = sum(depths)`` block ``i`` takes layer index ``i`` (with another value
LiBai accepts, its stage's first); patch embedding is on layer 0, norm/pool/head on -1, each patch merging on the
stage of its Swin stage's last block.
"""
import numpy as np
import oneflow as flow
from flowvision.layers import trunc_normal_
from flowvision.models import to_2tuple
from oneflow import nn

from libai.config import configurable
from libai.layers import LayerNorm, Linear
from libai.utils import distributed as dist

from ..compat import layout
# The windows with reshape where LiBai 0.1.1's Swin has view after permute: one implementation for both models.
from ..compat.swin_v0_1 import window_partition, window_reverse
from ..random.layers import DropPath, Dropout
from .losses import SoftTargetCrossEntropy

__all__ = ["SwinTransformer", "SoftTargetCrossEntropy", "block_layer_indices"]


def _make_drop_path(rate, layer_idx):
    # SBP-correct: masks agree on replicas, differ across shards, same on every layout.
    return DropPath(rate, layer_idx=layer_idx) if rate > 0.0 else nn.Identity()


def _make_dropout(rate, layer_idx):
    return Dropout(rate, layer_idx=layer_idx) if rate > 0.0 else nn.Identity()


def _broadcast_sbp():
    return dist.get_nd_sbp([flow.sbp.broadcast, flow.sbp.broadcast])


def _constant(array, layer_idx):
    """A numpy constant as a global tensor replicated on ``layer_idx``'s ranks."""
    local = flow.tensor(np.ascontiguousarray(array))
    return local.to_global(placement=dist.get_layer_placement(layer_idx), sbp=_broadcast_sbp())


def _split_layer_indices(num_blocks, stage_ids):
    """Block ``i`` -> a LiBai layer index, given LiBai's layer -> stage table ``stage_ids``."""
    if len(stage_ids) == num_blocks:
        return list(range(num_blocks))
    # Block i goes to stage i*pp//N (stage sizes differ by at most one), on the stage's first layer.
    pipeline_size = max(stage_ids) + 1
    return [layout.first_layer_of_stage(i * pipeline_size // num_blocks, stage_ids) for i in range(num_blocks)]


def block_layer_indices(num_blocks):
    """LiBai layer index of each of ``num_blocks`` blocks, balanced over the pipeline stages."""
    return _split_layer_indices(num_blocks, layout.layer_stage_ids())


def _relative_position_index(window_size):
    wh, ww = window_size
    coords = np.stack(np.meshgrid(np.arange(wh), np.arange(ww), indexing="ij")).reshape(2, -1)
    rel = (coords[:, :, None] - coords[:, None, :]).transpose(1, 2, 0)  # N, N, 2
    return ((rel[..., 0] + wh - 1) * (2 * ww - 1) + rel[..., 1] + ww - 1).reshape(-1).astype(np.int64)


def _shifted_window_mask(resolution, window_size, shift_size):
    """[num_windows, N, N]: 0 inside one region of the rolled image, -100 across regions."""
    H, W = resolution
    regions = np.zeros((1, H, W, 1), dtype=np.float32)
    bounds = (slice(0, -window_size), slice(-window_size, -shift_size), slice(-shift_size, None))
    for i, (h, w) in enumerate((h, w) for h in bounds for w in bounds):
        regions[:, h, w, :] = i
    windows = regions.reshape(1, H // window_size, window_size, W // window_size, window_size)
    windows = windows.transpose(0, 1, 3, 2, 4).reshape(-1, window_size * window_size)
    diff = windows[:, None, :] - windows[:, :, None]
    return np.where(diff != 0, -100.0, 0.0).astype(np.float32)


class WindowAttention(nn.Module):
    """Window multi-head self attention with relative position bias; heads split over tp."""

    def __init__(self, dim, window_size, num_heads, qkv_bias=True, qk_scale=None,
                 attn_drop=0.0, proj_drop=0.0, *, layer_idx):
        super().__init__()
        self.window_size = window_size
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = qk_scale or self.head_dim ** -0.5
        table_rows = (2 * window_size[0] - 1) * (2 * window_size[1] - 1)
        # Each tp rank keeps the bias of its own heads: split on the heads dim, replicated over dp.
        self.relative_position_bias_table = nn.Parameter(flow.zeros(
            table_rows, num_heads, placement=dist.get_layer_placement(layer_idx),
            sbp=dist.get_nd_sbp([flow.sbp.broadcast, flow.sbp.split(1)])))
        trunc_normal_(self.relative_position_bias_table, std=0.02)
        self.register_buffer("relative_position_index",
                             _constant(_relative_position_index(window_size), layer_idx), persistent=False)
        self.qkv = Linear(dim, 3 * dim, bias=qkv_bias, parallel="col", layer_idx=layer_idx)
        self.attn_drop = _make_dropout(attn_drop, layer_idx)
        self.proj = Linear(dim, dim, parallel="row", layer_idx=layer_idx)
        self.proj_drop = _make_dropout(proj_drop, layer_idx)

    def forward(self, x, mask=None):
        """x: [num_windows * B, N, C]; mask: [num_windows, N, N] or None."""
        B_, N, C = x.shape
        qkv = self.qkv(x).reshape(B_, N, self.num_heads, 3 * self.head_dim).permute(0, 2, 1, 3)
        q, k, v = flow.chunk(qkv, chunks=3, dim=-1)  # each [B_, heads, N, head_dim]
        attn = flow.matmul(q * self.scale, k, transpose_b=True)

        # index_select, not table[index]: on oneflow 0.9.0 getitem with a tensor index on a
        # [B, S(1)] (dp x tp) table returns gradients that miss the data-parallel reduction.
        bias = flow.index_select(self.relative_position_bias_table, 0, self.relative_position_index)
        attn = attn + bias.reshape(N, N, -1).permute(2, 0, 1).unsqueeze(0)
        if mask is not None:
            nW = mask.shape[0]
            attn = attn.reshape(B_ // nW, nW, self.num_heads, N, N) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.reshape(B_, self.num_heads, N, N)
        attn = self.attn_drop(flow.softmax(attn, dim=-1))

        x = flow.matmul(attn, v).transpose(1, 2).reshape(B_, N, C)
        return self.proj_drop(self.proj(x))


class Mlp(nn.Module):
    """fc1 (column-parallel) -> GELU -> fc2 (row-parallel); unfused ops (CPU has no fused kernels)."""

    def __init__(self, dim, hidden_dim, drop=0.0, *, layer_idx):
        super().__init__()
        self.fc1 = Linear(dim, hidden_dim, parallel="col", layer_idx=layer_idx)
        self.act = nn.GELU()
        self.fc2 = Linear(hidden_dim, dim, parallel="row", layer_idx=layer_idx)
        self.drop = _make_dropout(drop, layer_idx)

    def forward(self, x):
        return self.drop(self.fc2(self.act(self.fc1(x))))


class SwinTransformerBlock(nn.Module):
    def __init__(self, dim, input_resolution, num_heads, window_size=7, shift_size=0, mlp_ratio=4.0,
                 qkv_bias=True, qk_scale=None, drop=0.0, attn_drop=0.0, drop_path=0.0,
                 norm_layer=LayerNorm, *, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.input_resolution = input_resolution
        self.window_size = window_size
        self.shift_size = shift_size
        if min(input_resolution) <= window_size:  # one window covers the map: nothing to shift
            self.shift_size = 0
            self.window_size = min(input_resolution)
        assert 0 <= self.shift_size < self.window_size, "shift_size must be in [0, window_size)"

        self.norm1 = norm_layer(dim, layer_idx=layer_idx)
        self.attn = WindowAttention(dim, to_2tuple(self.window_size), num_heads, qkv_bias, qk_scale,
                                    attn_drop, drop, layer_idx=layer_idx)
        self.drop_path = _make_drop_path(drop_path, layer_idx)
        self.norm2 = norm_layer(dim, layer_idx=layer_idx)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), drop, layer_idx=layer_idx)
        mask = None
        if self.shift_size > 0:
            mask = _constant(_shifted_window_mask(input_resolution, self.window_size, self.shift_size),
                             layer_idx)
        self.register_buffer("attn_mask", mask, persistent=False)

    def forward(self, x):
        x = x.to_global(placement=dist.get_layer_placement(self.layer_idx))
        H, W = self.input_resolution
        B, L, C = x.shape
        assert L == H * W, "input feature has wrong size"
        ws, shift = self.window_size, self.shift_size

        shortcut = x
        x = self.norm1(x).reshape(B, H, W, C)
        if shift > 0:
            x = flow.roll(x, shifts=(-shift, -shift), dims=(1, 2))
        windows = window_partition(x, ws).reshape(-1, ws * ws, C)
        windows = self.attn(windows, self.attn_mask)
        x = window_reverse(windows.reshape(-1, ws, ws, C), ws, H, W)
        if shift > 0:
            x = flow.roll(x, shifts=(shift, shift), dims=(1, 2))
        x = shortcut + self.drop_path(x.reshape(B, H * W, C))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class PatchMerging(nn.Module):
    def __init__(self, input_resolution, dim, norm_layer=LayerNorm, *, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.input_resolution = input_resolution
        self.norm = norm_layer(4 * dim, layer_idx=layer_idx)
        # Row-parallel keeps activations [S(0), B] (a "data" Linear would also split the batch over tp).
        self.reduction = Linear(4 * dim, 2 * dim, bias=False, parallel="row", layer_idx=layer_idx)

    def forward(self, x):
        x = x.to_global(placement=dist.get_layer_placement(self.layer_idx))
        H, W = self.input_resolution
        B, L, C = x.shape
        assert L == H * W and H % 2 == 0 and W % 2 == 0, f"bad input {tuple(x.shape)} for {H}x{W}"
        x = x.reshape(B, H, W, C)
        x = flow.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], dim=-1)
        return self.reduction(self.norm(x.reshape(B, -1, 4 * C)))


class PatchEmbed(nn.Module):
    """Image -> [B, num_patches, embed_dim] on layer 0."""

    def __init__(self, img_size=224, patch_size=4, in_chans=3, embed_dim=96, norm_layer=None):
        super().__init__()
        self.img_size = to_2tuple(img_size)
        patch_size = to_2tuple(patch_size)
        self.patches_resolution = [self.img_size[0] // patch_size[0], self.img_size[1] // patch_size[1]]
        self.num_patches = self.patches_resolution[0] * self.patches_resolution[1]
        conv = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)
        # The local init kernels run asynchronously and read the generator when they run: wait
        # for them, or the global inits issued next may draw first (measured: 1 of 3 runs differed).
        flow._oneflow_internal.eager.Sync()
        self.proj = conv.to_global(placement=dist.get_layer_placement(0), sbp=_broadcast_sbp())
        self.norm = norm_layer(embed_dim, layer_idx=0) if norm_layer is not None else None

    def forward(self, x):
        x = x.to_global(placement=dist.get_layer_placement(0))
        assert tuple(x.shape[2:]) == self.img_size, f"input {tuple(x.shape)} != model {self.img_size}"
        x = self.proj(x).flatten(2).transpose(1, 2)
        return self.norm(x) if self.norm is not None else x


class BasicLayer(nn.Module):
    """One Swin stage: ``len(layer_indices)`` blocks, then optional patch merging."""

    def __init__(self, dim, input_resolution, num_heads, window_size, layer_indices, mlp_ratio=4.0,
                 qkv_bias=True, qk_scale=None, drop=0.0, attn_drop=0.0, drop_path=(),
                 norm_layer=LayerNorm, downsample=None):
        super().__init__()
        self.blocks = nn.ModuleList([
            SwinTransformerBlock(dim, input_resolution, num_heads, window_size,
                                 shift_size=0 if i % 2 == 0 else window_size // 2, mlp_ratio=mlp_ratio,
                                 qkv_bias=qkv_bias, qk_scale=qk_scale, drop=drop, attn_drop=attn_drop,
                                 drop_path=drop_path[i], norm_layer=norm_layer, layer_idx=layer_idx)
            for i, layer_idx in enumerate(layer_indices)
        ])
        self.downsample = None
        if downsample is not None:
            self.downsample = downsample(input_resolution, dim, norm_layer, layer_idx=layer_indices[-1])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.downsample(x) if self.downsample is not None else x


class SwinTransformer(nn.Module):
    """Swin Transformer (arXiv:2103.14030) for dp x tp x pp; arguments as ``libai.models.SwinTransformer``.

    Needs ``train.dist.pipeline_num_layers = sum(depths)`` under pipeline parallelism (see the module docstring).
    ``forward(images, labels=None)`` returns ``{"losses": loss}`` when training with labels, else
    ``{"prediction_scores": logits}``."""

    @configurable
    def __init__(self, img_size=224, patch_size=4, in_chans=3, num_classes=1000, embed_dim=96,
                 depths=[2, 2, 6, 2], num_heads=[3, 6, 12, 24], window_size=7, mlp_ratio=4.0,
                 qkv_bias=True, qk_scale=None, drop_rate=0.0, attn_drop_rate=0.0, drop_path_rate=0.1,
                 norm_layer=LayerNorm, ape=False, patch_norm=True, use_checkpoint=False, loss_func=None,
                 **kwargs):
        super().__init__()
        if use_checkpoint:
            raise NotImplementedError("activation checkpointing is not supported (nor in libai's Swin)")
        depths, num_heads = list(depths), list(num_heads)
        tp = dist.get_dist_util().tensor_parallel_size
        for stage, heads in enumerate(num_heads):
            dim = embed_dim * 2 ** stage
            if dim % heads:
                raise ValueError(f"Swin stage {stage}: width {dim} is not divisible by num_heads={heads}")
            if heads % tp:
                raise ValueError(
                    f"Swin stage {stage}: num_heads={heads} is not divisible by tensor_parallel_size={tp} "
                    f"(each tensor-parallel rank owns num_heads/tp heads)")
        self.num_classes = num_classes
        self.num_layers = len(depths)
        self.ape = ape
        self.num_features = int(embed_dim * 2 ** (self.num_layers - 1))

        self.patch_embed = PatchEmbed(img_size, patch_size, in_chans, embed_dim,
                                      norm_layer if patch_norm else None)
        resolution = self.patch_embed.patches_resolution
        if ape:
            self.absolute_pos_embed = nn.Parameter(flow.zeros(
                1, self.patch_embed.num_patches, embed_dim,
                placement=dist.get_layer_placement(0), sbp=_broadcast_sbp()))
            trunc_normal_(self.absolute_pos_embed, std=0.02)
        self.pos_drop = _make_dropout(drop_rate, 0)

        dpr = np.linspace(0, drop_path_rate, sum(depths)).tolist()  # stochastic depth decay rule
        layer_idx = block_layer_indices(sum(depths))
        self.layers = nn.ModuleList()
        for i in range(self.num_layers):
            first, last = sum(depths[:i]), sum(depths[:i + 1])
            self.layers.append(BasicLayer(
                dim=embed_dim * 2 ** i,
                input_resolution=(resolution[0] // 2 ** i, resolution[1] // 2 ** i),
                num_heads=num_heads[i], window_size=window_size, layer_indices=layer_idx[first:last],
                mlp_ratio=mlp_ratio, qkv_bias=qkv_bias, qk_scale=qk_scale, drop=drop_rate,
                attn_drop=attn_drop_rate, drop_path=dpr[first:last], norm_layer=norm_layer,
                downsample=PatchMerging if i < self.num_layers - 1 else None))

        self.norm = norm_layer(self.num_features, layer_idx=-1)
        # Row-parallel: logits come out [S(0), B], like the labels LiBai places on the last stage.
        self.head = (Linear(self.num_features, num_classes, parallel="row", layer_idx=-1)
                     if num_classes > 0 else nn.Identity())
        self.loss_func = SoftTargetCrossEntropy() if loss_func is None else loss_func
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(m):
        if isinstance(m, Linear):
            trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.constant_(m.bias, 0)
        elif isinstance(m, LayerNorm):
            nn.init.constant_(m.bias, 0)
            nn.init.constant_(m.weight, 1.0)

    @classmethod
    def from_config(cls, cfg):
        keys = ["img_size", "patch_size", "in_chans", "num_classes", "embed_dim", "depths", "num_heads",
                "window_size", "mlp_ratio", "qkv_bias", "qk_scale", "drop_rate", "drop_path_rate",
                "ape", "patch_norm", "use_checkpoint"]
        kwargs = {key: cfg[key] for key in keys}
        if "attn_drop_rate" in cfg:  # libai's from_config drops it; honour it when given
            kwargs["attn_drop_rate"] = cfg["attn_drop_rate"]
        return kwargs

    def forward_features(self, x):
        x = self.patch_embed(x)
        if self.ape:
            x = x + self.absolute_pos_embed
        x = self.pos_drop(x)
        for layer in self.layers:
            x = layer(x)
        x = self.norm(x.to_global(placement=dist.get_layer_placement(-1)))
        return x.mean(dim=1)  # average pool over tokens

    def forward(self, images, labels=None):
        logits = self.head(self.forward_features(images))
        if labels is not None and self.training:
            return {"losses": self.loss_func(logits, labels)}
        return {"prediction_scores": logits}
