"""On every rank: the pre-mixup global batches of LiBai's real image loader over the digits.

A global batch of 32 (micro batch ``32 // dp``), no mixup, augmentation from all three streams
each rank seeded alike: flowvision's ``RandomChoice`` (python), ``RandomCrop`` and the flips
(numpy), and a user transform drawing from OneFlow's CPU generator (one op: flowvision's own
OneFlow transforms cost ~8 ops a sample; tests/test_global_order.py covers them in process).
The dataset: the first 100 digits, each sample also holding its index as one more field, so the
batch says which samples it holds.  An epoch is 3 global batches (96 samples, 4 dropped), so
step 3 is the first of epoch 1.  Variants:

* ``layout_invariant`` / ``fast``: ``ConsistentBatchTrainer`` in that ``train.randomness`` mode;
* ``stock``: LiBai's ``DefaultTrainer``;
* ``unkeyed``: ``GlobalOrderBatchSampler`` as a plain batch sampler, no ``KeyedAugmentation``
  (the sampler half alone);
* ``resume_mid`` / ``resume_epoch``: ``layout_invariant`` resumed through LiBai's
  ``cfg.dataloader.consumed_samples`` at step 1 and at step 2 (epoch 0's last batch).

Stage-0 ranks report, per variant and recorded step, the indices and a digest of each
augmented image of the global batch; every rank reports how many batches it joined.
"""
import hashlib

import oneflow as flow
from flowvision import transforms as T
from libai.config import LazyCall
from libai.data.build import trivial_batch_collator
from libai.data.structures import DistTensorData
from libai.engine import DefaultTrainer
from oneflow.utils.data import DataLoader

from common import get_batch, image_loader_config, on_stage0, replicated_on_stage0, run_or_die, setup_layout_and_digits
from libai_ext import ConsistentBatchTrainer, GlobalOrderBatchSampler, seed_everything
from libai_ext.compat.layout import placement_data_parallel_rank
from libai_ext.data import CIFAR100Folder
from libai_ext.data.transforms import CIFAR100_TRAIN_MEAN, CIFAR100_TRAIN_STD
from libai_ext.testing import write_rank_result

GLOBAL_BATCH = 32
SEED = 1234  # the python/numpy/OneFlow streams before each variant
ORDER_SEED = 0  # train.seed of image_loader_config: the sampler's and the augmentation keys' seed
DIGITS = 100
STEPS = [0, 1, 2, 3, 4]
RESUMES = {"resume_mid": 1, "resume_epoch": 2}  # variant: first step after the resume


class RandomContrast:
    """A user's own transform, drawing from OneFlow's CPU generator."""

    def __call__(self, tensor):
        return tensor * (0.5 + flow.rand(1).item())


def augmentation():
    return T.Compose([
        T.RandomChoice([T.RandomHorizontalFlip(), T.RandomVerticalFlip()]),
        T.RandomCrop(32, padding=4),
        T.ToTensor(),
        RandomContrast(),
        T.Normalize(mean=CIFAR100_TRAIN_MEAN, std=CIFAR100_TRAIN_STD),
    ])


class IndexedDigits(CIFAR100Folder):
    """The first ``DIGITS`` training digits; each sample also holds its index (on stage 0, like the images)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.data, self.targets = self.data[:DIGITS], self.targets[:DIGITS]

    def __getitem__(self, index):
        sample = super().__getitem__(index)
        sample.set("indices", DistTensorData(flow.tensor(index, dtype=flow.long), placement_idx=0))
        return sample


def trainer_loader(trainer, data, micro_batch, randomness, consumed=None):
    folder = LazyCall(IndexedDigits)(root=data, train=True, transform=LazyCall(augmentation)())
    cfg = image_loader_config(folder, micro_batch, randomness=randomness)
    if consumed is not None:
        cfg.dataloader.consumed_samples = consumed  # where LiBai's resume puts the position
    return trainer.build_train_loader(cfg)[0]


def unkeyed_loader(data, micro_batch, dp):
    dataset = IndexedDigits(data, train=True, transform=augmentation())
    sampler = GlobalOrderBatchSampler(dataset, micro_batch, data_parallel_rank=placement_data_parallel_rank(),
                                      data_parallel_size=dp, seed=ORDER_SEED)
    return DataLoader(dataset, batch_sampler=sampler, num_workers=0, collate_fn=trivial_batch_collator)


def record(variant, trainer, loader, steps, first=0):
    """Iterate ``loader``, which starts at step ``first``, through the last of ``steps``; report those."""
    batches, joined = iter(loader), 0
    for step in range(first, max(steps) + 1):
        data = next(batches)
        if step not in steps:
            continue
        batch = get_batch(trainer, data)
        joined += 1
        indices, images = replicated_on_stage0(batch["indices"]), replicated_on_stage0(batch["images"])
        if on_stage0():
            write_rank_result(variant=variant, step=step, indices=indices.numpy().tolist(),
                              images=[hashlib.sha1(img.tobytes()).hexdigest()[:16] for img in images.numpy()])
    return joined


def main():
    args = setup_layout_and_digits()
    micro = GLOBAL_BATCH // args.dp
    runs = {  # variant: (trainer, loader, steps to record, the loader's first step)
        "layout_invariant": (ConsistentBatchTrainer, lambda: trainer_loader(
            ConsistentBatchTrainer, args.data, micro, "layout_invariant"), STEPS, 0),
        "fast": (ConsistentBatchTrainer, lambda: trainer_loader(ConsistentBatchTrainer, args.data, micro, "fast"),
                 STEPS[:2], 0),
        "stock": (DefaultTrainer, lambda: trainer_loader(DefaultTrainer, args.data, micro, "fast"), STEPS[:2], 0),
        "unkeyed": (ConsistentBatchTrainer, lambda: unkeyed_loader(args.data, micro, args.dp), STEPS[:2], 0),
    }
    for variant, first in RESUMES.items():
        runs[variant] = (ConsistentBatchTrainer, lambda first=first: trainer_loader(
            ConsistentBatchTrainer, args.data, micro, "layout_invariant", consumed=first * GLOBAL_BATCH),
            [first, first + 1], first)
    joined = {}
    for variant, (trainer, build, steps, first) in runs.items():
        seed_everything(SEED, randomness="fast" if variant in ("fast", "stock") else "layout_invariant")
        joined[variant] = record(variant, trainer, build(), steps, first)
    write_rank_result(variant="summary", stage0=on_stage0(), joined=joined)


if __name__ == "__main__":
    run_or_die(main)
