"""LiBai's Swin CIFAR-100 recipe on 8 GPUs, split over data, tensor and pipeline parallelism.

    python -m oneflow.distributed.launch --nproc_per_node 8 tools/train_net.py \
        --config-file configs/swin_cifar100.py

LiBai's own ``libai.models.SwinTransformer`` (Swin-T: 224 px, patch 4, window 7, embed 96, depths
[2, 2, 6, 2], heads [3, 6, 12, 24], drop-path 0.2) with LiBai's CIFAR-100 recipe (its
``configs/swin_cifar100.py``, ``configs/common/models/swin/swin_tiny_patch4_window7_224.py`` and
``configs/common/data/cifar100.py``): ``RandomResizedCrop`` to 224 with bicubic interpolation and
``RandomHorizontalFlip`` for training, bicubic ``Resize(256)`` + ``CenterCrop(224)`` for testing, both
normalised by CIFAR-100's statistics; flowvision's batch ``Mixup`` (mixup 0.8, cutmix 1.0) with
flowvision's ``SoftTargetCrossEntropy``; AdamW 5e-4, weight decay 0.05, no clipping, 300 epochs with
20 of linear warm-up then cosine.  What differs from LiBai's file, and why:

* the layout: (dp, tp, pp) = (2, 2, 2) instead of dp 8, with ``ConsistentBatchTrainer``.  Under
  pipeline parallelism stock LiBai pairs stage 0's augmented images with the last stage's labels
  (docs/the-bug.md); the plugin feeds every stage the same batch.  LiBai's Swin splits only its
  MLPs over tp (its attention is data-parallel), so Swin-T's heads need not divide by tp;
* the global batch stays LiBai's 256 (32 per GPU on 8 data-parallel GPUs): 128 per data-parallel
  group here;
* the data: ``libai_ext.data.CIFAR100Folder`` reads the extracted ``cifar-100-python`` folder under
  ./data/cifar100 and downloads nothing (LiBai's ``CIFAR100Dataset`` downloads, then checks each
  file's md5); a missing file is named.

Add ``train.trainer=libai.engine.DefaultTrainer`` to run stock LiBai.  The model and the recipe
train on CPU ranks too, at reduced size (tests/test_configs.py runs one iteration on 8 ranks);
configs/demo_swin_digits_cpu.py is a CPU-sized demo of this project's own Swin.
"""
from flowvision import transforms
from flowvision.data import Mixup
from flowvision.loss.cross_entropy import SoftTargetCrossEntropy
from flowvision.transforms import InterpolationMode
from flowvision.transforms.functional import str_to_interp_mode
from libai.config import LazyCall
from libai.data.build import build_image_test_loader, build_image_train_loader
from libai.models import SwinTransformer
from omegaconf import OmegaConf

from libai_ext.data import CIFAR100Folder
from libai_ext.data.transforms import CIFAR100_TRAIN_MEAN, CIFAR100_TRAIN_STD

from .common.graph import graph
from .common.optim import optim
from .common.train import train

# Swin-T (LiBai's swin_tiny_patch4_window7_224), 100 classes. Keyword arguments rather than LiBai's
# cfg=: a LazyCall inside cfg (the loss) would reach the model uninstantiated.
model = LazyCall(SwinTransformer)(
    img_size=224, patch_size=4, in_chans=3, num_classes=100,
    embed_dim=96, depths=[2, 2, 6, 2], num_heads=[3, 6, 12, 24], window_size=7, mlp_ratio=4.0,
    qkv_bias=True, qk_scale=None, drop_rate=0.0, drop_path_rate=0.2, ape=False, patch_norm=True,
    loss_func=LazyCall(SoftTargetCrossEntropy)(),  # mixup's soft labels
)

IMG_SIZE = "${model.img_size}"  # the crops follow the model (a smaller model for a smoke run takes smaller crops)
train_aug = LazyCall(transforms.Compose)(transforms=[
    LazyCall(transforms.RandomResizedCrop)(size=IMG_SIZE, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0),
                                           interpolation=str_to_interp_mode("bicubic")),
    LazyCall(transforms.RandomHorizontalFlip)(),
    LazyCall(transforms.ToTensor)(),
    LazyCall(transforms.Normalize)(mean=CIFAR100_TRAIN_MEAN, std=CIFAR100_TRAIN_STD),
])
test_aug = LazyCall(transforms.Compose)(transforms=[
    LazyCall(transforms.Resize)(size=256, interpolation=InterpolationMode.BICUBIC),
    LazyCall(transforms.CenterCrop)(size=IMG_SIZE),
    LazyCall(transforms.ToTensor)(),
    LazyCall(transforms.Normalize)(mean=CIFAR100_TRAIN_MEAN, std=CIFAR100_TRAIN_STD),
])

data_root = "./data/cifar100"
dataloader = OmegaConf.create()
dataloader.train = LazyCall(build_image_train_loader)(
    dataset=[LazyCall(CIFAR100Folder)(root=data_root, train=True, transform=train_aug)],
    num_workers=4,
    mixup_func=LazyCall(Mixup)(mixup_alpha=0.8, cutmix_alpha=1.0, prob=1.0, switch_prob=0.5, mode="batch",
                               num_classes=100),
)
dataloader.test = [LazyCall(build_image_test_loader)(
    dataset=LazyCall(CIFAR100Folder)(root=data_root, train=False, transform=test_aug),
    num_workers=4,
)]

train.trainer = "libai_ext.ConsistentBatchTrainer"
train.seed = 1234

train.dist.data_parallel_size = 2
train.dist.tensor_parallel_size = 2
train.dist.pipeline_parallel_size = 2
# One pipeline layer index per Swin block: the 12 blocks split 6 + 6 over the two stages.
train.dist.pipeline_num_layers = 12

# LiBai's recipe: 32 images per GPU on 8 data-parallel GPUs = 256 per step. Keep 256 with dp=2.
train.train_micro_batch_size = 128
train.num_accumulation_steps = 1
train.test_micro_batch_size = 32
train.train_epoch = 300
train.warmup_ratio = 20 / 300
train.evaluation.eval_period = 200
train.log_period = 20
train.output_dir = "./output/swin_cifar100"
train.scheduler.warmup_factor = 5e-7
train.scheduler.alpha = 0.0
train.scheduler.warmup_method = "linear"
train.amp.enabled = False
train.activation_checkpoint.enabled = False

optim.lr = 5e-4
optim.eps = 1e-8
optim.weight_decay = 0.05
optim.params.clip_grad_max_norm = None
optim.params.clip_grad_norm_type = None

# Eager, as LiBai's recipe sets it.
graph.enabled = False
