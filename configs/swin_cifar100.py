"""LiBai's Swin CIFAR-100 recipe on 8 GPUs, split over data, tensor and pipeline parallelism.

    python -m oneflow.distributed.launch --nproc_per_node 8 tools/train_net.py \
        --config-file configs/swin_cifar100.py

Layout (dp, tp, pp) = (2, 2, 2). Under pipeline parallelism stock LiBai pairs stage 0's augmented
images with the last stage's labels (see docs/the-bug.md); ConsistentBatchTrainer feeds every stage
the same batch. Add `train.trainer=libai.engine.DefaultTrainer` to run stock LiBai.

Data: the extracted `cifar-100-python` folder (train, test, meta) under ./data/cifar100; nothing is
downloaded and CIFAR100Folder says what is missing. configs/swin_digits_cpu.py is the CPU-sized twin.
"""
from libai.config import LazyCall
from libai.data.build import build_image_test_loader, build_image_train_loader
from omegaconf import OmegaConf

from libai_ext.data import CIFAR100Folder, build_mixup, cifar_test_transform, cifar_train_transform
from libai_ext.models.swin import SwinTransformer

from .common.graph import graph
from .common.optim import optim
from .common.train import train

# Swin-T widths (96 * 2^i) and depths, resized for 32x32 inputs: LiBai's recipe uses patch 4 /
# window 7 for 224x224. Patch 2 gives a 16x16 token map, window 4 tiles it (16 -> 8 -> 4 -> 2 after
# each merge; the last stage is one 2x2 window). Swin-T's heads [3, 6, 12, 24] cannot be split over
# tp=2 (each tensor-parallel rank owns num_heads / tp heads), hence [4, 8, 16, 32]: head dim 24.
DEPTHS = [2, 2, 6, 2]
NUM_HEADS = [4, 8, 16, 32]
model = LazyCall(SwinTransformer)(
    img_size=32, patch_size=2, in_chans=3, num_classes=100,
    embed_dim=96, depths=DEPTHS, num_heads=NUM_HEADS, window_size=4, mlp_ratio=4.0,
    drop_rate=0.0, attn_drop_rate=0.0, drop_path_rate=0.1,
    # loss: SwinTransformer's default SoftTargetCrossEntropy, which takes mixup's soft labels.
)

data_root = "./data/cifar100"
dataloader = OmegaConf.create()
dataloader.train = LazyCall(build_image_train_loader)(
    dataset=[LazyCall(CIFAR100Folder)(
        root=data_root, train=True,
        # RandomCrop(32, padding=4) + horizontal flip + normalize, as in LiBai's CIFAR-100 data config.
        transform=LazyCall(cifar_train_transform)(img_size=32, hflip=True))],
    num_workers=4,
    # The recipe's batch-wise mixup/cutmix, plus label smoothing: soft labels on every step.
    mixup_func=LazyCall(build_mixup)(num_classes=100, mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1),
)
dataloader.test = [LazyCall(build_image_test_loader)(
    dataset=LazyCall(CIFAR100Folder)(root=data_root, train=False,
                                     transform=LazyCall(cifar_test_transform)(img_size=32)),
    num_workers=4,
)]

train.trainer = "libai_ext.ConsistentBatchTrainer"
# A data-parallel group (here 4 ranks: tp2 x pp2) reads the same samples and must augment them
# alike; the two groups should draw different augmentations. "data_parallel" seeds exactly that.
train.seed = 1234
train.seed_scope = "data_parallel"

train.dist.data_parallel_size = 2
train.dist.tensor_parallel_size = 2
train.dist.pipeline_parallel_size = 2
# One pipeline layer index per Swin block: the 12 blocks split 6 + 6 over the two stages.
train.dist.pipeline_num_layers = sum(DEPTHS)

# LiBai's recipe: 32 images per GPU on 8 data-parallel GPUs = 256 per step. Keep 256 with dp=2.
train.train_micro_batch_size = 128
train.global_batch_size = 256
train.test_micro_batch_size = 100  # 10,000 test images = 50 full steps of 2 x 100
train.train_epoch = 300
train.train_iter = 0  # derived from train_epoch (50,000 / 256 -> 196 iterations per epoch)
train.warmup_ratio = 20 / 300
train.log_period = 100
train.evaluation.eval_period = 196  # once per epoch
train.checkpointer.period = 196 * 10
train.output_dir = "./output/swin_cifar100"
train.scheduler.warmup_factor = 5e-7
train.scheduler.alpha = 0.0
train.scheduler.warmup_method = "linear"

optim.lr = 5e-4
optim.eps = 1e-8
optim.weight_decay = 0.05
# The recipe trains without gradient clipping.
optim.params.clip_grad_max_norm = None
optim.params.clip_grad_norm_type = None

# Eager, like the CPU runs this project measures; libai_ext's GraphBase (graph.enabled=True) is
# the OneFlow 0.9.0-compatible graph if you want one.
graph.enabled = False
