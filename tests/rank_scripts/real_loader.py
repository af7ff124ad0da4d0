"""LiBai's own image loader over the digits folder, one batch through get_batch (pairing.py ``--real-loader``
runs it after its cases, in the same launch).

No augmentation, so each image identifies its sample: stage-0 ranks report, per
data-parallel shard, which samples the images are and whether the labels (moved
back from the last stage) are those samples' labels.
"""
import numpy as np
from libai.config import LazyCall
from libai.engine import DefaultTrainer

from common import get_batch, image_loader_config, on_stage0, replicated_on_stage0
from libai_ext import ConsistentBatchTrainer
from libai_ext.data import CIFAR100Folder, cifar_test_transform
from libai_ext.testing import write_rank_result

TRAINERS = {"stock": DefaultTrainer, "fixed": ConsistentBatchTrainer}
MICRO_BATCH = 8


def report(data):
    """One record per trainer on each stage-0 rank (the layout is set up)."""
    dataset = CIFAR100Folder(data, train=True, transform=cifar_test_transform())
    label_of = {dataset[i].get("images").tensor.numpy().tobytes(): int(dataset.targets[i]) for i in range(len(dataset))}
    for name, trainer in TRAINERS.items():
        folder = LazyCall(CIFAR100Folder)(root=data, train=True, transform=LazyCall(cifar_test_transform)())
        loader = trainer.build_train_loader(image_loader_config(folder, MICRO_BATCH))[0]
        batch = get_batch(trainer, next(iter(loader)))
        images = replicated_on_stage0(batch["images"])
        labels = replicated_on_stage0(batch["labels"])
        if not on_stage0():
            continue
        keys = [img.numpy().tobytes() for img in images]
        write_rank_result(
            check="real_loader", trainer=name,
            distinct_samples=len(set(keys)), batch=len(keys),
            labels_match=bool(np.array_equal([label_of[k] for k in keys], labels.numpy())),
        )

