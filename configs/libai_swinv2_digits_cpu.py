"""LiBai main's own SwinTransformerV2 on the digits, sized for CPU ranks, every dropout and drop-path on.

``libai.models.SwinTransformerV2`` (LiBai main only; patch 8 on the 32x32 upscaled digits: 4x4
tokens, window 2, embed 48, depths [2, 2], heads [2, 4]) with the data pipeline of
configs/libai_swin_digits_cpu.py: random crop, mixup/cutmix, label smoothing.

    python -m oneflow.distributed.launch --nproc_per_node 1 tools/train_net.py \
        --config-file configs/libai_swinv2_digits_cpu.py
    ... --nproc_per_node 2 ... train.dist.pipeline_parallel_size=2   # blocks 0-1 | 2-3
    ... --nproc_per_node 2 ... train.dist.tensor_parallel_size=2

Like LiBai's Swin, its blocks hard-code ``fused_bias_add_dropout=True`` in the window attention and
``bias_gelu_fusion`` + ``bias_dropout_fusion`` in the MLP, none of which has a CPU kernel in
OneFlow 0.9.0: the fused dropouts draw from libai_ext's streams (which run on CPU), the fused
bias-add + GeLU is composed from CPU ops on CPU tensors (``libai_ext.compat.cpu_bias_gelu``).

Randomness: dropout 0.1 after the patch embedding and on every block's attention probabilities
and outputs, drop-path rising to 0.2 over the blocks (LiBai's DropPath), mixup.
"""
from libai.config import LazyCall
from libai.models import SwinTransformerV2

from libai_ext.data import DIGITS_NUM_CLASSES
from libai_ext.models.losses import SoftTargetCrossEntropy

from .common.digits import dataloader
from .common.graph import graph
from .common.optim import optim
from .common.digits_train import train

DEPTHS = [2, 2]
# Keyword arguments, not cfg=: LiBai's from_config drops attn_drop_rate.
model = LazyCall(SwinTransformerV2)(
    img_size=32, patch_size=8, in_chans=3, num_classes=DIGITS_NUM_CLASSES,
    embed_dim=48, depths=DEPTHS, num_heads=[2, 4], window_size=2, mlp_ratio=4.0,
    drop_rate=0.1, attn_drop_rate=0.1, drop_path_rate=0.2, pretrained_window_sizes=[0] * len(DEPTHS),
    loss_func=LazyCall(SoftTargetCrossEntropy)(),  # mixup's soft labels
)

train.output_dir = "./output/libai_swinv2_digits_cpu"
# Blocks are numbered across stages (0, 1 | 2, 3), as in LiBai's Swin.
train.dist.pipeline_num_layers = sum(DEPTHS)

optim.lr = 1e-3
