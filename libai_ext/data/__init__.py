"""Datasets for LiBai runs: CIFAR-100 from its standard folder, a bundled digits stand-in, real text
for LiBai's GPT-2 and BERT (built offline with LiBai's preprocess tool), and the layout-invariant
data order (global-order train and test samplers, per-sample keyed augmentation, the train
position that checkpoints save).  May import ``random`` (the data keys) and ``compat``."""
from ..random.eval_order import GlobalOrderTestSampler
from ..random.global_order import BatchPosition, EpochBatch, GlobalOrderBatchSampler
from ..random.keyed_dataset import KeyedAugmentation
from .cifar import CIFAR100Folder
from .digits import (
    DIGITS_NUM_CLASSES,
    DIGITS_TEST_SIZE,
    DIGITS_TRAIN_SIZE,
    ensure_digits_cifar,
    ensure_digits_imagenet,
    stratified_split,
    upscale_digits,
)
from .ordered_loader import GlobalOrderLoader, batch_position
from .position import DataPosition, GlobalBatchGuard
from .text_data import ensure_text_data, text_data_file
from .transforms import (
    CIFAR100_TRAIN_MEAN,
    CIFAR100_TRAIN_STD,
    build_mixup,
    cifar_test_transform,
    cifar_train_transform,
)

__all__ = [
    "BatchPosition",
    "CIFAR100Folder",
    "CIFAR100_TRAIN_MEAN",
    "CIFAR100_TRAIN_STD",
    "DIGITS_NUM_CLASSES",
    "DIGITS_TEST_SIZE",
    "DIGITS_TRAIN_SIZE",
    "DataPosition",
    "EpochBatch",
    "GlobalBatchGuard",
    "GlobalOrderBatchSampler",
    "GlobalOrderLoader",
    "GlobalOrderTestSampler",
    "KeyedAugmentation",
    "batch_position",
    "build_mixup",
    "cifar_test_transform",
    "cifar_train_transform",
    "ensure_digits_cifar",
    "ensure_digits_imagenet",
    "ensure_text_data",
    "stratified_split",
    "text_data_file",
    "upscale_digits",
]
