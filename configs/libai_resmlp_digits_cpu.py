"""LiBai main's own ResMLP on the digits, sized for CPU ranks, with its drop-path on.

``libai.models.ResMLP`` (LiBai main only; patch 8 on the 32x32 upscaled digits: 16 patches,
embed 64, depth 4) with the data pipeline of configs/libai_vit_digits_cpu.py: random crop,
mixup/cutmix, label smoothing.

    python -m oneflow.distributed.launch --nproc_per_node 1 tools/train_net.py \
        --config-file configs/libai_resmlp_digits_cpu.py
    ... --nproc_per_node 2 ... train.dist.pipeline_parallel_size=2   # blocks 0-1 | 2-3
    ... --nproc_per_node 2 ... train.dist.tensor_parallel_size=2

Randomness: drop-path 0.2 on every block (LiBai's ResMLP gives each block the same rate) and
mixup.  LiBai's ResMLP takes ``drop_rate`` but passes it nowhere (its blocks accept ``drop`` and
build their MLP without dropout), so drop-path is its only random op; the config keeps LiBai's
``drop_rate=0.0`` rather than a value that would change nothing.
"""
from libai.config import LazyCall
from libai.models import ResMLP

from libai_ext.data import DIGITS_NUM_CLASSES
from libai_ext.models.losses import SoftTargetCrossEntropy

from .common.digits import dataloader
from .common.graph import graph
from .common.optim import optim
from .common.digits_train import train

DEPTH = 4
# Keyword arguments, not cfg=: a LazyCall inside cfg (the loss) would reach the model uninstantiated.
model = LazyCall(ResMLP)(
    img_size=32, patch_size=8, in_chans=3, embed_dim=64, depth=DEPTH,
    drop_rate=0.0, drop_path_rate=0.2, init_scale=0.1,  # LiBai's ResMLP-12 values
    num_classes=DIGITS_NUM_CLASSES,
    loss_func=LazyCall(SoftTargetCrossEntropy)(),  # mixup's soft labels
)

train.output_dir = "./output/libai_resmlp_digits_cpu"
# Block i has layer_idx i: pp2 puts blocks 0-1 on stage 0, 2-3 on stage 1.
train.dist.pipeline_num_layers = DEPTH

optim.lr = 1e-3
