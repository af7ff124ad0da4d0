"""The `make demo` job: a 2-stage pipeline on 2 CPU ranks, augmentation and mixup on.

    python -m oneflow.distributed.launch --nproc_per_node 2 tools/train_net.py \
        --config-file configs/demo_pipeline_cpu.py

Data: scikit-learn's handwritten digits written once as a CIFAR-format folder
(libai_ext.data.ensure_digits_cifar), read and augmented like CIFAR-100.
Add `train.trainer=libai.engine.DefaultTrainer` to run stock LiBai instead.
"""
from libai.config import LazyCall
from libai.data.build import build_image_test_loader, build_image_train_loader
from omegaconf import OmegaConf

from libai_ext.data import (
    CIFAR100Folder, build_mixup, cifar_test_transform, cifar_train_transform, ensure_digits_cifar,
)
from libai_ext.models.pipeline_mixer import PipelineMixer

from .common.graph import graph
from .common.optim import optim
from .common.train import train

DEPTH = 4
data_root = LazyCall(ensure_digits_cifar)(root="./data/digits")

model = LazyCall(PipelineMixer)(img_size=32, patch_size=4, embed_dim=32, depth=DEPTH, num_classes=10)

dataloader = OmegaConf.create()
dataloader.train = LazyCall(build_image_train_loader)(
    dataset=[LazyCall(CIFAR100Folder)(
        root=data_root, train=True, transform=LazyCall(cifar_train_transform)(img_size=32, hflip=False))],
    num_workers=0,
    mixup_func=LazyCall(build_mixup)(num_classes=10, mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1),
)
dataloader.test = [LazyCall(build_image_test_loader)(
    dataset=LazyCall(CIFAR100Folder)(root=data_root, train=False, transform=LazyCall(cifar_test_transform)(img_size=32)),
    num_workers=0,
)]

train.output_dir = "./output/demo_pipeline_cpu"
train.train_micro_batch_size = 32
train.test_micro_batch_size = 60
train.train_iter = 300
train.warmup_ratio = 0.05
train.log_period = 20
train.checkpointer.period = 100000  # no checkpoints in the demo
train.evaluation.eval_period = 100
train.dist.pipeline_parallel_size = 2
train.dist.pipeline_num_layers = DEPTH  # block i has layer_idx i: two blocks per stage

optim.lr = 3e-3
