"""Every random transform flowvision ships, and a user's own drawing from python, numpy and OneFlow, as test cases.

``drawing_classes()`` inventories flowvision's transform classes from the installed package (a class whose
source draws from python ``random``, numpy or OneFlow), so a transform a new flowvision adds fails
``tests/test_augmentation_keying.py`` until it has a case here.  ``CASES``: name -> a builder of the transform,
applied to a 32x32 RGB PIL image.  ``AllCases``: the digits, each sample run through every case in turn; a
sample's field ``digests`` holds one 63-bit digest of each case's output (``images`` the last case's tensor).
"""
import hashlib
import inspect
import random
import re

import numpy as np
import oneflow as flow
from flowvision import transforms as T
from flowvision.data import auto_augment, mixup, random_erasing
from flowvision.transforms import transforms as transform_classes
from libai.data.structures import DistTensorData, Instance
from PIL import Image

from libai_ext.data import CIFAR100Folder

DRAWS = re.compile(r"\brandom\.|np\.random|flow\.(rand|randn|randint|randperm|normal|bernoulli)\b|flow\._C\.rand"
                   r"|\.uniform_\(|\.normal_\(|_get_pixels\(")
MODULES = (transform_classes, auto_augment, random_erasing, mixup)
NOT_PER_SAMPLE = {
    "RandomTransforms": "abstract base of RandomApply/RandomChoice/RandomOrder (its __call__ raises)",
    "Mixup": "mixes a whole batch: keyed per global batch by libai_ext.random.global_mixup "
             "(tests/test_global_mixup.py, tests/test_global_mixup_layouts.py)",
}


def drawing_classes():
    """{name: class} of every class defined in flowvision's transform modules whose code (or a base's) draws random
    numbers."""
    found = {}
    for module in MODULES:
        for name, cls in vars(module).items():
            if inspect.isclass(cls) and cls.__module__ == module.__name__ and any(
                    base.__module__.startswith("flowvision") and DRAWS.search(inspect.getsource(base))
                    for base in cls.__mro__[:-1]):
                found[name] = cls
    return found


class UserPython:
    def __call__(self, img):
        return T.functional.adjust_brightness(img, random.uniform(0.5, 1.5))


class UserNumpy:
    def __call__(self, img):
        return T.functional.adjust_contrast(img, float(np.random.uniform(0.5, 1.5)))


class UserOneFlow:
    """Two OneFlow draws queued before either is read, on two streams on a rank > 0 (as ColorJitter's)."""

    def __call__(self, tensor):
        order = flow.randperm(3)
        scale = float(flow.empty(1).uniform_(0.5, 1.5).item())
        return tensor[order.tolist()] * scale


class TwoCrops:
    """MoCo v3's wrapper: two Composes held as attributes."""

    def __init__(self, first, second):
        self.base_transform1, self.base_transform2 = first, second

    def __call__(self, img):
        return flow.cat([self.base_transform1(img), self.base_transform2(img)])


def _tensor(*ops):
    return T.Compose([*ops, T.ToTensor()])


CASES = {
    "RandomApply": lambda: _tensor(T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.5)),
    "RandomChoice": lambda: _tensor(T.RandomChoice([T.RandomHorizontalFlip(1.0), T.RandomVerticalFlip(1.0),
                                                    T.Pad(2)])),
    "RandomOrder": lambda: _tensor(T.RandomOrder([T.RandomCrop(32, padding=3), T.ColorJitter(0.4, 0.4)])),
    "RandomCrop": lambda: _tensor(T.RandomCrop(32, padding=4)),
    "RandomHorizontalFlip": lambda: _tensor(T.RandomHorizontalFlip()),
    "RandomVerticalFlip": lambda: _tensor(T.RandomVerticalFlip()),
    "RandomResizedCrop": lambda: _tensor(T.RandomResizedCrop(32, scale=(0.3, 1.0))),
    "RandomSizedCrop": lambda: _tensor(T.RandomSizedCrop(32)),
    "ColorJitter": lambda: _tensor(T.ColorJitter(0.4, 0.4, 0.4, 0.1)),
    "RandomRotation": lambda: _tensor(transform_classes.RandomRotation(30)),  # not exported by flowvision 0.1.0
    "AutoAugment": lambda: _tensor(auto_augment.auto_augment_transform("v0", {"img_mean": (124, 116, 104)})),
    "RandAugment": lambda: _tensor(auto_augment.rand_augment_transform("rand-m9-mstd0.5-inc1",
                                                                       {"img_mean": (124, 116, 104)})),
    "AugMixAugment": lambda: _tensor(auto_augment.augment_and_mix_transform("augmix-m5-w3-d2",
                                                                            {"img_mean": (124, 116, 104)})),
    "AugmentOp": lambda: _tensor(auto_augment.AugmentOp("Rotate", prob=0.5, magnitude=9,
                                                        hparams={"magnitude_std": 0.5})),
    "RandomErasing": lambda: T.Compose([T.ToTensor(), random_erasing.RandomErasing(
        0.9, mode="pixel", max_count=2, device="cpu")]),
    "user_python": lambda: _tensor(UserPython()),
    "user_numpy": lambda: _tensor(UserNumpy()),
    "user_oneflow": lambda: T.Compose([T.ToTensor(), UserOneFlow()]),
    "two_crops": lambda: TwoCrops(_tensor(T.RandomResizedCrop(32), T.RandomApply([T.ColorJitter(0.4, 0.4)], p=0.8)),
                                  _tensor(T.RandomResizedCrop(32), T.RandomHorizontalFlip())),
}


def digest(tensor):
    """63 bits of a tensor's bytes (fits an int64 field)."""
    return int.from_bytes(hashlib.blake2b(tensor.numpy().tobytes(), digest_size=8).digest(), "little") >> 1


class AllCases(CIFAR100Folder):
    """The first ``count`` digits; each sample run through every case of ``CASES``, in order."""

    def __init__(self, root, count=64):
        super().__init__(root, train=True, transform=None, max_samples=count)
        self.cases = {name: build() for name, build in CASES.items()}

    def __getitem__(self, index):
        image = Image.fromarray(self.data[index])
        outputs = [case(image) for case in self.cases.values()]
        return Instance(
            images=DistTensorData(outputs[-1], placement_idx=0),
            digests=DistTensorData(flow.tensor([digest(o) for o in outputs], dtype=flow.int64), placement_idx=0),
            indices=DistTensorData(flow.tensor(index, dtype=flow.int64), placement_idx=0),
        )
