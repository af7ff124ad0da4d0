import os
import pickle

import numpy as np
import pytest
import sklearn.datasets as sklearn_datasets  # a requirement of libai_ext: missing, the suite fails

from libai_ext.data import (
    DIGITS_NUM_CLASSES,
    DIGITS_TEST_SIZE,
    DIGITS_TRAIN_SIZE,
    CIFAR100Folder,
    build_mixup,
    cifar_test_transform,
    cifar_train_transform,
    ensure_digits_cifar,
)


@pytest.fixture(scope="module")
def digits_root(tmp_path_factory):
    return ensure_digits_cifar(str(tmp_path_factory.mktemp("digits")))


@pytest.fixture(scope="module")
def sk_digits():
    return sklearn_datasets.load_digits()


def test_sizes_and_classes(digits_root, sk_digits):
    train = CIFAR100Folder(digits_root, train=True)
    test = CIFAR100Folder(digits_root, train=False)
    assert len(train) == DIGITS_TRAIN_SIZE and len(test) == DIGITS_TEST_SIZE
    assert len(train) + len(test) == len(sk_digits.target) == 1797
    assert DIGITS_NUM_CLASSES == 10
    assert train.classes == test.classes == [str(i) for i in range(10)]
    for ds in (train, test):
        assert set(ds.targets) == set(range(10))  # every class in both splits
    # Stratified: each class's test share stays within one sample of 360/1797.
    counts = np.bincount(sk_digits.target)
    test_counts = np.bincount(test.targets, minlength=10)
    assert np.all(np.abs(test_counts - counts * DIGITS_TEST_SIZE / 1797) < 1)


def test_samples_are_libai_instances(digits_root):
    train = CIFAR100Folder(digits_root, train=True, transform=cifar_train_transform(32, hflip=False))
    test = CIFAR100Folder(digits_root, train=False, transform=cifar_test_transform(32))
    for ds in (train, test):
        for i in (0, len(ds) - 1):
            sample = ds[i]
            images, labels = sample.get("images"), sample.get("labels")
            assert tuple(images.tensor.shape) == (3, 32, 32)
            assert images.placement_idx == 0 and labels.placement_idx == -1
            assert 0 <= int(labels.tensor.item()) < DIGITS_NUM_CLASSES
            assert int(labels.tensor.item()) == ds.targets[i]


def test_resize_and_flip_options(digits_root):
    ds = CIFAR100Folder(digits_root, train=True, transform=cifar_train_transform(16, hflip=True))
    assert tuple(ds[0].get("images").tensor.shape) == (3, 16, 16)
    ds = CIFAR100Folder(digits_root, train=False, transform=cifar_test_transform(16))
    assert tuple(ds[0].get("images").tensor.shape) == (3, 16, 16)


def _expected_image(img8):
    # Independent of the library: 0..16 -> 0..255, each pixel a 4x4 block, gray in all three channels.
    out = np.zeros((32, 32, 3), dtype=np.uint8)
    for r in range(8):
        for c in range(8):
            out[4 * r : 4 * r + 4, 4 * c : 4 * c + 4, :] = int(round(img8[r, c] * 255 / 16))
    return out


def test_round_trip_matches_sklearn(digits_root, sk_digits):
    # Identify samples by their pixels: the split's indices are the library's business.
    by_bytes = {}
    for img8, label in zip(sk_digits.images, sk_digits.target):
        by_bytes.setdefault(_expected_image(img8).tobytes(), set()).add(int(label))
    for train in (True, False):
        ds = CIFAR100Folder(digits_root, train=train)
        for i in (0, 1, 7, len(ds) // 2, len(ds) - 1):
            assert ds.data[i].shape == (32, 32, 3) and ds.data[i].dtype == np.uint8
            assert ds.targets[i] in by_bytes[ds.data[i].tobytes()]
            img = ds[i].get("images").tensor.numpy()
            np.testing.assert_allclose(img, ds.data[i].transpose(2, 0, 1) / 255.0, atol=1e-6)
    # The raw pickle layout is CIFAR's: R, G, B planes per row.
    with open(os.path.join(digits_root, "cifar-100-python", "test"), "rb") as f:
        entry = pickle.load(f, encoding="latin1")
    assert entry["data"].shape == (DIGITS_TEST_SIZE, 3072) and entry["data"].dtype == np.uint8
    assert entry["coarse_labels"] == entry["fine_labels"]
    first = entry["data"][0].reshape(3, 32, 32).transpose(1, 2, 0)
    assert entry["fine_labels"][0] in by_bytes[first.tobytes()]


def test_every_sklearn_digit_lands_in_exactly_one_split(digits_root, sk_digits):
    written = np.concatenate(
        [CIFAR100Folder(digits_root, train=t).data for t in (True, False)]
    ).reshape(1797, -1)
    expected = np.stack([_expected_image(x) for x in sk_digits.images]).reshape(1797, -1)
    key = lambda a: sorted(map(bytes, a))  # noqa: E731
    assert key(written) == key(expected)


def test_ensure_is_idempotent(tmp_path):
    root = str(tmp_path)
    assert ensure_digits_cifar(root) == root
    folder = tmp_path / "cifar-100-python"
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    labels = CIFAR100Folder(root, train=False).targets
    assert ensure_digits_cifar(root) == root
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before
    assert CIFAR100Folder(root, train=False).targets == labels
    assert [p.name for p in tmp_path.iterdir()] == ["cifar-100-python"]  # no temp folders left


def test_ensure_refuses_a_foreign_folder(tmp_path):
    (tmp_path / "cifar-100-python").mkdir()
    (tmp_path / "cifar-100-python" / "train").write_bytes(b"")
    with pytest.raises(FileExistsError, match="cifar-100-python"):
        ensure_digits_cifar(str(tmp_path))


def test_missing_folder_names_expected_path(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        CIFAR100Folder(str(tmp_path), train=True)
    msg = str(err.value)
    assert os.path.join(str(tmp_path), "cifar-100-python", "train") in msg
    assert "ensure_digits_cifar" in msg


def test_reads_bytes_keys(tmp_path):
    # The official archive's pickles may keep bytes keys; the reader must accept both.
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    data = np.arange(2 * 3072, dtype=np.int64).astype(np.uint8).reshape(2, 3072)
    for split in ("train", "test"):
        with open(folder / split, "wb") as f:
            pickle.dump({b"data": data, b"fine_labels": [3, 1]}, f, protocol=2)
    with open(folder / "meta", "wb") as f:
        pickle.dump({b"fine_label_names": [b"a", b"b", b"c", b"d"]}, f, protocol=2)
    ds = CIFAR100Folder(str(tmp_path), train=True)
    assert ds.classes == ["a", "b", "c", "d"] and ds.targets == [3, 1]
    np.testing.assert_array_equal(ds.data[1][..., 0], data[1, :1024].reshape(32, 32))
    np.testing.assert_array_equal(ds.data[1][..., 2], data[1, 2048:].reshape(32, 32))


def test_mixup_gives_soft_targets():
    import oneflow as flow

    mixup = build_mixup(DIGITS_NUM_CLASSES)
    images, targets = mixup(flow.randn(4, 3, 32, 32), flow.tensor([0, 1, 2, 3]))
    assert tuple(images.shape) == (4, 3, 32, 32)
    assert tuple(targets.shape) == (4, DIGITS_NUM_CLASSES)
    np.testing.assert_allclose(targets.sum(1).numpy(), np.ones(4), rtol=1e-5)
