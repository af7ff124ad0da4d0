"""LiBai's ViT on the digits (configs/libai_vit_digits_cpu.py) with heavy per-sample augmentation, read in the main
process: RandomResizedCrop, flip, RandAugment, ColorJitter under RandomApply, a Gaussian blur drawing from python
random, ToTensor, Normalize, RandomErasing; no mixup, hard labels, 3 iterations, a loss record each.

Every random source of the pipeline: python (blur, RandAugment, RandomErasing), numpy (flip, RandomApply,
RandAugment) and OneFlow (RandomResizedCrop's ``uniform_`` and ``randint``, ColorJitter's ``randperm`` and
``uniform_``, RandomErasing's ``normal_``).  tests/test_augmentation_keying.py runs it on 1 rank and twice on dp2.
"""
import os
import random

from flowvision import transforms as T
from flowvision.data.auto_augment import rand_augment_transform
from flowvision.data.random_erasing import RandomErasing
from libai.config import LazyCall, LazyConfig
from PIL import ImageFilter

from libai_ext.data import CIFAR100_TRAIN_MEAN, CIFAR100_TRAIN_STD

_vit = LazyConfig.load(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs",
                                    "libai_vit_digits_cpu.py"))
dataloader, graph, model, optim, train = _vit.dataloader, _vit.graph, _vit.model, _vit.optim, _vit.train


class GaussianBlur:
    """MoCo v3's blur: a radius drawn from python random."""

    def __init__(self, sigma=(0.1, 2.0)):
        self.sigma = sigma

    def __call__(self, img):
        return img.filter(ImageFilter.GaussianBlur(radius=random.uniform(*self.sigma)))


def heavy_augmentation():
    return T.Compose([
        T.RandomResizedCrop(32, scale=(0.5, 1.0)),
        T.RandomHorizontalFlip(),
        rand_augment_transform("rand-m9-mstd0.5", {"translate_const": 10, "img_mean": (124, 116, 104)}),
        T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8),
        T.RandomApply([GaussianBlur()], p=0.5),
        T.ToTensor(),
        T.Normalize(mean=CIFAR100_TRAIN_MEAN, std=CIFAR100_TRAIN_STD),
        RandomErasing(0.25, mode="pixel", device="cpu"),
    ])


dataloader.train.dataset[0].transform = LazyCall(heavy_augmentation)()
dataloader.train.num_workers = 0
dataloader.train.mixup_func = None
model.loss_func = None  # LiBai's default cross entropy on hard labels
train.train_iter = 3
train.log_period = 1
train.evaluation.enabled = False
