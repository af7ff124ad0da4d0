"""LiBai's own VisionTransformer on the digits, sized for CPU ranks, every dropout and drop-path on.

``libai.models.VisionTransformer`` (patch 8 on the 32x32 upscaled digits: 16 patches + the class
token, embed 64, 4 heads, depth 4) with the data pipeline of configs/demo_swin_digits_cpu.py:
scikit-learn's handwritten digits as a CIFAR-format folder, random crop, mixup/cutmix and
label smoothing (soft labels, so the loss is a soft-target cross entropy).

    python -m oneflow.distributed.launch --nproc_per_node 1 tools/train_net.py \
        --config-file configs/libai_vit_digits_cpu.py
    ... --nproc_per_node 2 ... train.dist.pipeline_parallel_size=2   # blocks 0-1 | 2-3
    ... --nproc_per_node 2 ... train.dist.tensor_parallel_size=2
    ... --nproc_per_node 8 ... train.dist.data_parallel_size=2 train.dist.tensor_parallel_size=2 \
        train.dist.pipeline_parallel_size=2

Runs unchanged on LiBai 0.1.1 and main.  Randomness: dropout 0.1 after the position embedding
and on every block's attention probabilities and outputs, drop-path rising to 0.2 over the
blocks (LiBai's DropPath), mixup.  Fusions: ViT passes none to its TransformerLayers, whose
defaults are all off.
"""
from libai.config import LazyCall
from libai.models import VisionTransformer

from libai_ext.data import DIGITS_NUM_CLASSES
from libai_ext.models.losses import SoftTargetCrossEntropy

from .common.digits import dataloader
from .common.graph import graph
from .common.optim import optim
from .common.digits_train import train

DEPTH = 4
model = LazyCall(VisionTransformer)(
    img_size=32, patch_size=8, in_chans=3, embed_dim=64, depth=DEPTH, num_heads=4, mlp_ratio=4.0,
    drop_rate=0.1, attn_drop_rate=0.1, drop_path_rate=0.2,
    num_classes=DIGITS_NUM_CLASSES,
    loss_func=LazyCall(SoftTargetCrossEntropy)(),  # mixup's soft labels
)

train.output_dir = "./output/libai_vit_digits_cpu"
# Block i has layer_idx i (pos/patch embedding on layer 0, norm and head on -1).
train.dist.pipeline_num_layers = DEPTH

optim.lr = 1e-3
