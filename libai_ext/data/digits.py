"""scikit-learn's handwritten digits written as a CIFAR-100 folder, or as an ImageNet folder.

A real (if small) image dataset bundled with scikit-learn: no download.  ``ensure_digits_cifar``'s folder goes
through real CIFAR-100's code path (``CIFAR100Folder``), ``ensure_digits_imagenet``'s through LiBai's own
``ImageNetDataset`` (flowvision's ``ImageFolder``).
"""
import json
import os
import pickle
import shutil
import tempfile

import numpy as np

from .cifar import FOLDER

DIGITS_NUM_CLASSES = 10
DIGITS_TOTAL = 1797
DIGITS_TEST_SIZE = 360
DIGITS_TRAIN_SIZE = DIGITS_TOTAL - DIGITS_TEST_SIZE  # 1437
DIGITS_SPLIT_SEED = 0
MARKER = "DIGITS_STANDIN.json"
_FILES = ("train", "test", "meta", MARKER)


def upscale_digits(images):
    """(N, 8, 8) values 0..16 -> (N, 32, 32, 3) uint8: 0..255, nearest 4x upscaling, gray as RGB."""
    gray = np.rint(np.asarray(images, dtype=np.float64) * (255.0 / 16.0)).astype(np.uint8)
    big = gray.repeat(4, axis=1).repeat(4, axis=2)
    return np.repeat(big[..., None], 3, axis=3)


def stratified_split(labels, test_size=DIGITS_TEST_SIZE, seed=DIGITS_SPLIT_SEED):
    """Fixed stratified (train_idx, test_idx), both sorted.

    numpy's RandomState stream is frozen across numpy releases, so the split does not move
    with library versions (sklearn's train_test_split gives no such promise).
    """
    labels = np.asarray(labels)
    classes, counts = np.unique(labels, return_counts=True)
    # Largest-remainder allocation: per-class quotas that sum exactly to test_size.
    exact = counts * test_size / len(labels)
    quota = np.floor(exact).astype(int)
    extra = test_size - quota.sum()
    quota[np.argsort(-(exact - quota), kind="stable")[:extra]] += 1
    rng = np.random.RandomState(seed)
    test = []
    for c, q in zip(classes, quota):
        idx = np.flatnonzero(labels == c)
        test.extend(rng.permutation(idx)[:q])
    test = np.sort(np.array(test, dtype=np.int64))
    train = np.setdiff1d(np.arange(len(labels)), test)
    return train, test


def _complete(folder):
    return all(os.path.isfile(os.path.join(folder, f)) for f in _FILES)


def _write_split(path, images, labels):
    n = len(labels)
    entry = {
        "filenames": [f"digit_{i:05d}.png" for i in range(n)],
        "batch_label": os.path.basename(path),
        "fine_labels": [int(x) for x in labels],
        "coarse_labels": [int(x) for x in labels],
        # CIFAR rows: R plane, G plane, B plane, each 32x32 row-major.
        "data": np.ascontiguousarray(images.transpose(0, 3, 1, 2)).reshape(n, 3072),
    }
    with open(path, "wb") as f:
        pickle.dump(entry, f, protocol=2)


def ensure_digits_cifar(root):
    """Write the digits under ``<root>/cifar-100-python/`` unless already there; return ``root``.

    Safe when several ranks call it at once: each writes a private temporary folder and renames it into place."""
    folder = os.path.join(root, FOLDER)
    if os.path.isdir(folder):
        if _complete(folder):
            return root
        # Never overwrite something else (e.g. the real CIFAR-100) that sits at this path.
        raise FileExistsError(
            f"{folder} exists but is not a complete digits stand-in (missing one of {_FILES}); "
            f"pick another root or remove that folder."
        )

    from sklearn.datasets import load_digits  # bundled with scikit-learn: no download

    digits = load_digits()
    images, labels = upscale_digits(digits.images), digits.target.astype(np.int64)
    train, test = stratified_split(labels)

    os.makedirs(root, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{FOLDER}.tmp-", dir=root)
    try:
        _write_split(os.path.join(tmp, "train"), images[train], labels[train])
        _write_split(os.path.join(tmp, "test"), images[test], labels[test])
        meta = {
            "fine_label_names": [str(i) for i in range(DIGITS_NUM_CLASSES)],
            "coarse_label_names": [str(i) for i in range(DIGITS_NUM_CLASSES)],
        }
        with open(os.path.join(tmp, "meta"), "wb") as f:
            pickle.dump(meta, f, protocol=2)
        info = {
            "source": "sklearn.datasets.load_digits",
            "upscaling": "values*255/16 rounded, nearest 8x8->32x32, gray replicated to RGB",
            "split": f"stratified, {len(train)} train / {len(test)} test, RandomState({DIGITS_SPLIT_SEED})",
            "test_indices": test.tolist(),
        }
        # Written last: its presence marks a finished folder.
        with open(os.path.join(tmp, MARKER), "w") as f:
            json.dump(info, f, indent=1)
        os.chmod(tmp, 0o755)  # mkdtemp makes it owner-only; the dataset folder should not be
        try:
            os.rename(tmp, folder)
        except OSError:
            if not _complete(folder):  # not a lost race: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def ensure_digits_imagenet(root):
    """Write the digits as ``<root>/train/<label>/<n>.png`` and ``<root>/val/<label>/<n>.png`` (32x32 RGB,
    the split of ``ensure_digits_cifar``) unless already there; return ``root``.  Safe when several ranks
    call it at once (a private temporary folder renamed into place)."""
    marker = os.path.join(root, MARKER)
    if os.path.isfile(marker):
        return root
    if os.path.isdir(root) and os.listdir(root):
        raise FileExistsError(f"{root} holds {sorted(os.listdir(root))[:5]} but no {MARKER}: not a digits "
                              "ImageNet folder; pick another root or remove it")
    from PIL import Image
    from sklearn.datasets import load_digits  # bundled with scikit-learn: no download

    digits = load_digits()
    images, labels = upscale_digits(digits.images), digits.target.astype(np.int64)
    os.makedirs(os.path.dirname(os.path.abspath(root)), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".digits-imagenet.tmp-", dir=os.path.dirname(os.path.abspath(root)))
    try:
        for split, indices in zip(("train", "val"), stratified_split(labels)):
            for n in indices:
                folder = os.path.join(tmp, split, f"{labels[n]:02d}")
                os.makedirs(folder, exist_ok=True)
                Image.fromarray(images[n]).save(os.path.join(folder, f"{n:05d}.png"))
        with open(os.path.join(tmp, MARKER), "w") as f:  # written last: marks a finished folder
            json.dump({"source": "sklearn.datasets.load_digits", "layout": "ImageNet: train/<class>, val/<class>"},
                      f, indent=1)
        os.chmod(tmp, 0o755)
        try:
            if os.path.isdir(root):
                os.rmdir(root)  # an empty folder (checked above) may stand where the data go
            os.rename(tmp, root)
        except OSError:
            if not os.path.isfile(marker):  # not a lost race: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root
