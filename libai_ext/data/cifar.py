"""CIFAR-100 read straight from the standard ``cifar-100-python`` pickles.

flowvision's (and so LiBai's) CIFAR classes md5-check every file against the official archive,
which rejects any other data written in the same format; this reader checks only the layout.
"""
import os
import pickle

import numpy as np
import oneflow as flow
from PIL import Image

from libai.data.structures import DistTensorData, Instance

FOLDER = "cifar-100-python"


def _get(d, key):
    # Pickles written by Python 2 (the official archive) may keep bytes keys even with latin1.
    if key in d:
        return d[key]
    bkey = key.encode("latin1")
    if bkey in d:
        return d[bkey]
    raise KeyError(f"key {key!r} not found (keys: {sorted(map(str, d))})")


def _load_pickle(path):
    with open(path, "rb") as f:
        return pickle.load(f, encoding="latin1")


def _missing(path, root):
    return FileNotFoundError(
        f"CIFAR-100 file not found: {path}. Put the extracted '{FOLDER}' folder "
        f"(with files train, test, meta) under {os.path.abspath(root)}; nothing is downloaded. "
        f"For a small bundled stand-in in the same format, call "
        f"libai_ext.data.ensure_digits_cifar({root!r}) first."
    )


def _to_tensor(img):
    # Without a transform a PIL image cannot go into DistTensorData: fall back to ToTensor's layout.
    arr = np.asarray(img, dtype=np.float32).transpose(2, 0, 1) / 255.0
    return flow.tensor(arr)


class CIFAR100Folder(flow.utils.data.Dataset):
    """CIFAR-100 (or anything in its pickle format) as LiBai ``Instance`` samples.

    As ``CIFAR100Dataset`` makes them (``images`` at placement_idx 0, ``labels`` at -1).  ``transform`` receives a
    32x32 RGB PIL image (without one: float CHW in [0, 1]); ``max_samples`` keeps the first ones (short epochs).
    """

    def __init__(self, root, train=True, transform=None, max_samples=None):
        self.root = root
        self.train = train
        self.transform = transform
        folder = os.path.join(root, FOLDER)
        split = os.path.join(folder, "train" if train else "test")
        meta = os.path.join(folder, "meta")
        for path in (split, meta):
            if not os.path.isfile(path):
                raise _missing(path, root)

        entry = _load_pickle(split)
        data = np.asarray(_get(entry, "data"), dtype=np.uint8)
        # Each row holds the R, G and B planes of a 32x32 image one after the other.
        self.data = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
        self.targets = [int(t) for t in _get(entry, "fine_labels")]
        if len(self.targets) != len(self.data):
            raise ValueError(f"{split}: {len(self.data)} images but {len(self.targets)} labels")
        if max_samples is not None:
            if int(max_samples) < 1:
                raise ValueError(f"CIFAR100Folder max_samples={max_samples} must be at least 1")
            self.data, self.targets = self.data[:int(max_samples)], self.targets[:int(max_samples)]
        names = _get(_load_pickle(meta), "fine_label_names")
        self.classes = [n.decode() if isinstance(n, bytes) else str(n) for n in names]

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        img = Image.fromarray(self.data[index])
        img = self.transform(img) if self.transform is not None else _to_tensor(img)
        return Instance(
            images=DistTensorData(img, placement_idx=0),
            labels=DistTensorData(flow.tensor(self.targets[index], dtype=flow.long), placement_idx=-1),
        )
