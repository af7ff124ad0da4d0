"""Augmentation of LiBai's Swin CIFAR-100 recipe, built from flowvision 0.1.0 (all run on CPU)."""
from flowvision import transforms as T
from flowvision.data import Mixup

# Per-channel statistics of the CIFAR-100 training set (the values LiBai's CIFAR-100 configs use).
CIFAR100_TRAIN_MEAN = (0.5070751592371323, 0.48654887331495095, 0.4409178433670343)
CIFAR100_TRAIN_STD = (0.2673342858792401, 0.2564384629170883, 0.27615047132568404)
CIFAR_NATIVE_SIZE = 32


def _resize(img_size):
    return [] if img_size == CIFAR_NATIVE_SIZE else [T.Resize((img_size, img_size))]


def cifar_train_transform(img_size=32, hflip=True, padding=4):
    """(Resize) + RandomCrop(padding) + RandomHorizontalFlip + ToTensor + Normalize.

    ``hflip=False`` drops the flip, which mirrors digits into non-digits.
    """
    ops = _resize(img_size) + [T.RandomCrop(img_size, padding=padding)]
    if hflip:
        ops.append(T.RandomHorizontalFlip())
    ops += [T.ToTensor(), T.Normalize(mean=CIFAR100_TRAIN_MEAN, std=CIFAR100_TRAIN_STD)]
    return T.Compose(ops)


def cifar_test_transform(img_size=32):
    """(Resize) + ToTensor + Normalize."""
    ops = _resize(img_size) + [
        T.ToTensor(),
        T.Normalize(mean=CIFAR100_TRAIN_MEAN, std=CIFAR100_TRAIN_STD),
    ]
    return T.Compose(ops)


def build_mixup(num_classes, mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1, prob=1.0):
    """flowvision Mixup/CutMix per batch, as in the recipe. Needs an even local batch size.

    Returns soft targets of shape (batch, num_classes): pair it with a soft-target loss.
    """
    return Mixup(
        mixup_alpha=mixup_alpha,
        cutmix_alpha=cutmix_alpha,
        prob=prob,
        switch_prob=0.5,
        mode="batch",
        label_smoothing=label_smoothing,
        num_classes=num_classes,
    )
