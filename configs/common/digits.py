"""The digits pipeline of the CPU vision configs: scikit-learn's handwritten digits as a CIFAR-format
folder (written on first use, no download), random crop, mixup/cutmix and label smoothing."""
from libai.config import LazyCall
from libai.data.build import build_image_test_loader, build_image_train_loader
from omegaconf import OmegaConf

from libai_ext.data import (
    DIGITS_NUM_CLASSES, CIFAR100Folder, build_mixup, cifar_test_transform, cifar_train_transform,
    ensure_digits_cifar,
)

data_root = LazyCall(ensure_digits_cifar)(root="./data/digits")
dataloader = OmegaConf.create()
dataloader.train = LazyCall(build_image_train_loader)(
    dataset=[LazyCall(CIFAR100Folder)(
        # hflip=False: a mirrored digit is not a digit.
        root=data_root, train=True, transform=LazyCall(cifar_train_transform)(img_size=32, hflip=False))],
    num_workers=0,
    # Soft labels are what the stock pipeline mismatches: keep mixup/cutmix + smoothing on.
    mixup_func=LazyCall(build_mixup)(num_classes=DIGITS_NUM_CLASSES, mixup_alpha=0.8, cutmix_alpha=1.0,
                                     label_smoothing=0.1),
)
dataloader.test = [LazyCall(build_image_test_loader)(
    dataset=LazyCall(CIFAR100Folder)(root=data_root, train=False,
                                     transform=LazyCall(cifar_test_transform)(img_size=32)),
    num_workers=0,
)]
