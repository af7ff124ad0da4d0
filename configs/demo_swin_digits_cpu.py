"""A CPU-sized demo: this project's own 3D-parallel Swin (libai_ext.models.swin) on the digits.

A 0.31 M-parameter Swin with random crop, mixup/cutmix and label smoothing, sized for a 2-core
machine; the experiments of docs/experiment.md and docs/layout_experiment.md use it.  LiBai's own
Swin is what configs/swin_cifar100.py (LiBai's CIFAR-100 recipe) and configs/libai_swin_digits_cpu.py
train.  The layout is chosen on the command line:

    # 1 rank
    python -m oneflow.distributed.launch --nproc_per_node 1 tools/train_net.py \
        --config-file configs/demo_swin_digits_cpu.py
    # 2-stage pipeline (2 ranks)
    ... --nproc_per_node 2 ... train.dist.pipeline_parallel_size=2
    # (dp, tp, pp) = (2, 2, 2) on 8 ranks
    ... --nproc_per_node 8 ... train.dist.pipeline_parallel_size=2 \
        train.dist.data_parallel_size=2 train.dist.tensor_parallel_size=2

Add `train.trainer=libai.engine.DefaultTrainer` for stock LiBai. docs/experiment.md uses this config.

Data: scikit-learn's 1,797 handwritten digits written once as a CIFAR-format folder
(libai_ext.data.ensure_digits_cifar): 1,437 train / 360 test, 8x8 upscaled to 32x32.
"""
from libai.config import LazyCall

from libai_ext.data import DIGITS_NUM_CLASSES
from libai_ext.models.swin import SwinTransformer

from .common.digits import dataloader
from .common.graph import graph
from .common.optim import optim
from .common.train import train

# Patch 8 on the 32x32 upscaled digits: each token sees 2x2 of the original 8x8 pixels, 4x4 tokens.
# Measured on this 2-core machine (fitting 256 digits, 150 steps): patch 8 reaches loss 0.03 at
# ~0.09 s/step; patch 4 (64 tokens, one original pixel each) only 1.0 at ~0.37 s/step.
# Window 2 keeps Swin's shifted windows (4 windows in stage 1; stage 2 is a single 2x2 window).
# Heads [2, 4] divide by tp=2, so the (2, 2, 2) layout works too.
DEPTHS = [2, 2]
model = LazyCall(SwinTransformer)(
    img_size=32, patch_size=8, in_chans=3, num_classes=DIGITS_NUM_CLASSES,
    embed_dim=48, depths=DEPTHS, num_heads=[2, 4], window_size=2, mlp_ratio=4.0,
    drop_rate=0.0, attn_drop_rate=0.0, drop_path_rate=0.1,
)

train.output_dir = "./output/demo_swin_digits_cpu"
train.train_micro_batch_size = 32  # even: flowvision's batch mixup needs pairs
train.test_micro_batch_size = 60   # 360 test images = 6 full batches (no padded last batch)
train.train_iter = 1500  # 4-6 min on 2 shared cores (measured 0.14-0.20 s/step, 1 rank or pp2)
train.warmup_ratio = 0.05
train.log_period = 10
train.checkpointer.period = 100000  # no periodic checkpoints (LiBai still saves model_final, model_best)
train.evaluation.eval_period = 100
train.seed = 1234
# One block per pipeline layer index; with pipeline_parallel_size=2 the 4 blocks split 2 + 2.
train.dist.pipeline_num_layers = sum(DEPTHS)

optim.lr = 2e-3
