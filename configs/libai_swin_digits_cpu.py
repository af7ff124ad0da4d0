"""LiBai's own SwinTransformer on the digits, sized for CPU ranks, every dropout and drop-path on.

``libai.models.SwinTransformer`` (patch 8 on the 32x32 upscaled digits: 4x4 tokens, window 2,
embed 48, depths [2, 2], heads [2, 4]) with the data pipeline of configs/demo_swin_digits_cpu.py
(the same sizes as this project's own Swin there): random crop, mixup/cutmix, label smoothing.

    python -m oneflow.distributed.launch --nproc_per_node 1 tools/train_net.py \
        --config-file configs/libai_swin_digits_cpu.py
    ... --nproc_per_node 2 ... train.dist.pipeline_parallel_size=2   # blocks 0-1 | 2-3
    ... --nproc_per_node 2 ... train.dist.tensor_parallel_size=2

LiBai's Swin hard-codes its fusions on both lines: ``fused_bias_add_dropout`` in the window
attention and ``bias_gelu_fusion`` + ``bias_dropout_fusion`` in the MLP.  The fused dropouts
draw from libai_ext's streams and run on CPU (libai_ext's routing); the fused bias-add + GeLU,
which has no CPU kernel, is composed from CPU ops on CPU tensors (``libai_ext.compat.cpu_bias_gelu``).
On LiBai 0.1.1 two more repairs apply (``libai_ext.compat.swin_v0_1``): its window partition
calls ``.view`` after ``.permute`` (which OneFlow refuses), and its blocks have no pipeline
layer index (every block would sit on stage 0), so they get main's numbering.

Randomness: dropout 0.1 after the patch embedding and on every block's attention probabilities
and outputs, drop-path rising to 0.2 over the blocks (LiBai's DropPath), mixup.
"""
from libai.config import LazyCall
from libai.models import SwinTransformer

from libai_ext.data import DIGITS_NUM_CLASSES
from libai_ext.models.losses import SoftTargetCrossEntropy

from .common.digits import dataloader
from .common.graph import graph
from .common.optim import optim
from .common.digits_train import train

DEPTHS = [2, 2]
# Keyword arguments, not cfg=: LiBai's from_config drops attn_drop_rate (on both lines).
model = LazyCall(SwinTransformer)(
    img_size=32, patch_size=8, in_chans=3, num_classes=DIGITS_NUM_CLASSES,
    embed_dim=48, depths=DEPTHS, num_heads=[2, 4], window_size=2, mlp_ratio=4.0,
    drop_rate=0.1, attn_drop_rate=0.1, drop_path_rate=0.2,
    loss_func=LazyCall(SoftTargetCrossEntropy)(),  # mixup's soft labels
)

train.output_dir = "./output/libai_swin_digits_cpu"
# Blocks are numbered across stages (0, 1 | 2, 3); the patch merge goes with the last block of its
# stage, the final norm and head on layer -1.
train.dist.pipeline_num_layers = sum(DEPTHS)

optim.lr = 1e-3
