"""What keyed augmentation's check by effect and its ordered OneFlow draws cost per batch.

    .venv/bin/python benchmarks/augmentation_check.py --batches 30 --out benchmarks/results/augmentation_check.md

One process, ``num_workers=0``, the digits training set, global batch 32, the layout-invariant loader
(``GlobalOrderBatchSampler`` + ``KeyedAugmentation``, libai_ext's wrappers of OneFlow's random ops installed as
the trainer installs them), an augmentation drawing from python, numpy and OneFlow (RandomResizedCrop, flip,
ColorJitter, ToTensor, RandomErasing).  Four loaders take turns batch by batch (``--batches`` rounds after one
warm-up batch each), so a shared host's load drifts hit them alike:

* ``no check``: ``train.augmentation_check.action="off"``;
* ``check every batch``: ``first_batches=0, period=1`` (the most it can cost: one sample read again and
  fingerprinted, the generators disturbed and put back, each batch);
* ``check (default)``: the first 2 batches, then one in 50;
* ``no check, draws unordered``: as ``no check`` without the wait before each OneFlow draw
  (``keyed_dataset.draws_in_call_order``), what the keyed read cost before that wait.

The table gives each loader's median batch time and its ratio to ``no check``.
"""
import contextlib
import os
import statistics
import sys
import time

from loader_keying import loader_arguments  # benchmarks/loader_keying.py (scripts run from benchmarks/)
from report import publish  # benchmarks/report.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
GLOBAL_BATCH = 32


def augmentation():
    from flowvision import transforms as T
    from flowvision.data.random_erasing import RandomErasing

    return T.Compose([T.RandomResizedCrop(32, scale=(0.5, 1.0)), T.RandomHorizontalFlip(),
                      T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.ToTensor(), RandomErasing(0.25, mode="pixel", device="cpu")])


def loaders(dataset):
    from libai.data.build import trivial_batch_collator
    from oneflow.utils.data import DataLoader

    from libai_ext.data import GlobalOrderBatchSampler, KeyedAugmentation
    from libai_ext.random.augmentation_check import AugmentationCheck

    def loader(check):
        return DataLoader(KeyedAugmentation(dataset, 0, check=check), sampler=GlobalOrderBatchSampler(
            dataset, GLOBAL_BATCH, seed=0), batch_size=None, collate_fn=trivial_batch_collator)

    return {
        "no check": (lambda: loader(None), False),
        "check every batch": (lambda: loader(AugmentationCheck(first_batches=0, period=1)), False),
        "check (default)": (lambda: loader(AugmentationCheck()), False),
        "no check, draws unordered": (lambda: loader(None), True),
    }


@contextlib.contextmanager
def unordered_draws():
    from libai_ext.random import keyed_dataset

    ordered = keyed_dataset.draws_in_call_order
    keyed_dataset.draws_in_call_order = contextlib.nullcontext
    try:
        yield
    finally:
        keyed_dataset.draws_in_call_order = ordered


def batch_seconds(builds, rounds):
    """{loader: [seconds per batch]}, the loaders taking turns one batch at a time."""
    iterators = {name: (iter(build()), unordered) for name, (build, unordered) in builds.items()}
    times = {name: [] for name in builds}
    for round_ in range(rounds + 1):
        for name, (iterator, unordered) in iterators.items():
            with unordered_draws() if unordered else contextlib.nullcontext():
                start = time.perf_counter()
                next(iterator)
                took = time.perf_counter() - start
            if round_:  # round 0 warms up
                times[name].append(took)
    return times


def main():
    args = loader_arguments(__doc__)

    from libai_ext.data import CIFAR100Folder, ensure_digits_cifar
    from libai_ext.random.layers.stochastic_ops import route_stochastic_ops

    route_stochastic_ops()
    dataset = CIFAR100Folder(ensure_digits_cifar(args.data), train=True, transform=augmentation())
    times = batch_seconds(loaders(dataset), args.batches)
    medians = {name: statistics.median(values) for name, values in times.items()}
    lines = [f"One process, num_workers=0, global batch {GLOBAL_BATCH}, {args.batches} batches per loader, taking "
             "turns batch by batch; median (quartiles) ms per batch.", "",
             "| loader | ms per batch | quartiles | ratio to no check |", "|---|---|---|---|"]
    for name, values in times.items():
        low, _, high = statistics.quantiles(values, n=4)
        lines.append(f"| {name} | {1e3 * medians[name]:.1f} | {1e3 * low:.1f}-{1e3 * high:.1f} | "
                     f"{medians[name] / medians['no check']:.2f}x |")
    publish("\n".join(lines) + "\n", args.out, title="Keyed augmentation: the check by effect and ordered draws")


if __name__ == "__main__":
    main()
