"""The ``train`` settings of the CPU vision configs on the digits (LiBai's ViT, Swin, SwinV2 and ResMLP): mixup's
pairs in every micro-batch, an evaluation every 200 iterations, no periodic checkpoints.  Each config adds its
output folder and how many layers its pipeline splits."""
from .train import train

train.train_micro_batch_size = 32  # even: flowvision's batch mixup needs pairs
train.test_micro_batch_size = 60   # 360 test images = 6 full batches
train.train_iter = 1000
train.warmup_ratio = 0.05
train.log_period = 10
train.checkpointer.period = 100000  # no periodic checkpoints
train.evaluation.eval_period = 200
train.seed = 1234
