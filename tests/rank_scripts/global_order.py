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
  ``cfg.dataloader.consumed_samples`` at step 1 and at step 2 (epoch 0's last batch);
* ``acc2`` / ``acc2_graph``: ``layout_invariant`` with 2 accumulation steps (micro batch
  ``32 // (dp * 2)``) for steps 0-3, eager and graph mode (LiBai 0.1.1's graph loader reads ``micro x acc`` per
  rank, LiBai main's reads micro-batches that its trainer joins);
* ``eval_*``: LiBai's own evaluator (``trainer.test``) over the first 45 test digits with a global
  test batch of 8 (``train.test_micro_batch_size = 8 // dp``), ``eval_iter`` 3 (24 samples) or
  all (``ConsistentBatchTrainer``), and 3 with stock ``DefaultTrainer``.

Stage-0 ranks report, per variant and recorded step, the indices and a digest of each
augmented image of the global batch (accumulation variants: each loader batch of their own, with
its ``batch_position`` and its rows' positions in the step); rank 0 reports the samples each evaluation scored, in order; every rank
reports how many batches it joined.
"""
import hashlib

import oneflow as flow
from flowvision import transforms as T
from libai.config import LazyCall
from libai.data.build import build_image_test_loader, trivial_batch_collator
from libai.data.structures import DistTensorData
from libai.engine import DefaultTrainer
from libai.evaluation import DatasetEvaluator
from oneflow.utils.data import DataLoader

from common import get_batch, image_loader_config, on_stage0, replicated_on_stage0, run_or_die, setup_layout_and_digits
from libai_ext import ConsistentBatchTrainer, GlobalOrderBatchSampler, seed_everything
from libai_ext.compat import fill_missing_config_keys
from libai_ext.compat.layout import placement_data_parallel_rank
from libai_ext.data import CIFAR100Folder, cifar_test_transform
from libai_ext.data.ordered_loader import GlobalOrderLoader, batch_position
from libai_ext.data.transforms import CIFAR100_TRAIN_MEAN, CIFAR100_TRAIN_STD
from libai_ext.testing import write_rank_result

GLOBAL_BATCH = 32
SEED = 1234  # the python/numpy/OneFlow streams before each variant
ORDER_SEED = 0  # train.seed of image_loader_config: the sampler's and the augmentation keys' seed
DIGITS = 100
STEPS = [0, 1, 2, 3, 4]
RESUMES = {"resume_mid": 1, "resume_epoch": 2}  # variant: first step after the resume
ACCUMULATION = 2
ACC_STEPS = 4  # steps 0-3: step 3 is the first of epoch 1
EVAL_DIGITS, EVAL_GLOBAL_BATCH = 45, 8
EVAL_ITERS = {"truncated": 3, "full": 10 ** 5}


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
    """The first ``count`` digits; each sample also holds its index (on stage 0, like the images)."""

    def __init__(self, *args, count=DIGITS, **kwargs):
        super().__init__(*args, **kwargs)
        self.data, self.targets = self.data[:count], self.targets[:count]

    def __getitem__(self, index):
        sample = super().__getitem__(index)
        sample.set("indices", DistTensorData(flow.tensor(index, dtype=flow.long), placement_idx=0))
        return sample


def trainer_loader(trainer, data, micro_batch, randomness, consumed=None, accumulation=1, graph=False):
    folder = LazyCall(IndexedDigits)(root=data, train=True, transform=LazyCall(augmentation)())
    cfg = image_loader_config(folder, micro_batch, randomness=randomness, num_accumulation_steps=accumulation)
    cfg.graph.enabled = graph
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


def record_loader_batches(variant, loader, batches):
    """Each stage-0 rank: its own ``batches`` loader batches, with where each lies in its global batch.

    Read from the global-order loader itself, under whatever the trainer wraps it in (stage-0-only
    loading; ranks outside stage 0 read nothing)."""
    while not isinstance(loader, GlobalOrderLoader):
        loader = loader.loader
    if on_stage0():
        iterator = iter(loader)
        for _ in range(batches):
            data = next(iterator)
            where = batch_position(data)
            write_rank_result(variant=variant, step=where.step, micro_step=where.micro_step,
                              positions=loader.sampler.step_positions(where.micro_step).tolist(),
                              indices=data.get("indices").tensor.numpy().tolist(),
                              images=[_digest(img) for img in data.get("images").tensor.numpy()])
    return batches


def _digest(image):
    return hashlib.sha1(image.tobytes()).hexdigest()[:16]


class ScoredSamples(DatasetEvaluator):
    """Keeps which samples the evaluation scored, in order (on the main process, where LiBai calls it)."""

    def __init__(self):
        self.scored = []

    def reset(self):
        self.scored = []

    def process(self, inputs, outputs):
        self.scored.extend(inputs["indices"].numpy().tolist())

    def evaluate(self):
        return {"scored": float(len(self.scored))}


def indices_model(**data):
    return {"indices": data["indices"]}


def evaluate(variant, trainer, data, dp, eval_iter):
    """LiBai's evaluation loop (``trainer.test``) over the indexed test digits; rank 0 reports what it scored."""
    folder = LazyCall(IndexedDigits)(root=data, train=False, count=EVAL_DIGITS,
                                     transform=LazyCall(cifar_test_transform)(img_size=32))
    cfg = image_loader_config(folder, EVAL_GLOBAL_BATCH // dp)
    cfg.train.evaluation = dict(eval_iter=eval_iter)
    cfg.dataloader.test = [LazyCall(build_image_test_loader)(dataset=folder, num_workers=0)]
    fill_missing_config_keys(cfg)  # LiBai main's test reads train.input_placement_device
    evaluator = ScoredSamples()
    trainer.test(cfg, trainer.build_test_loader(cfg), indices_model, evaluator)
    if flow.env.get_rank() == 0:
        write_rank_result(variant=variant, scored=evaluator.scored)
    return 1


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
    acc_micro = GLOBAL_BATCH // (args.dp * ACCUMULATION)
    for variant, graph in (("acc2", False), ("acc2_graph", True)):
        seed_everything(SEED, randomness="layout_invariant")
        loader = trainer_loader(ConsistentBatchTrainer, args.data, acc_micro, "layout_invariant",
                                accumulation=ACCUMULATION, graph=graph)
        per_step = 1 if _whole_steps(loader) else ACCUMULATION
        joined[variant] = record_loader_batches(variant, loader, ACC_STEPS * per_step)
    evaluations = {"eval_full": (ConsistentBatchTrainer, EVAL_ITERS["full"]),
                   "eval_truncated": (ConsistentBatchTrainer, EVAL_ITERS["truncated"]),
                   "eval_stock_truncated": (DefaultTrainer, EVAL_ITERS["truncated"])}
    for variant, (trainer, eval_iter) in evaluations.items():
        seed_everything(SEED, randomness="layout_invariant")
        joined[variant] = evaluate(variant, trainer, args.data, args.dp, eval_iter)
    write_rank_result(variant="summary", stage0=on_stage0(), joined=joined)


def _whole_steps(loader):
    """LiBai 0.1.1's graph loader: one batch holds a rank's whole slice of a global batch."""
    while not isinstance(loader, GlobalOrderLoader):
        loader = loader.loader
    return loader.sampler.whole_step


if __name__ == "__main__":
    run_or_die(main)
