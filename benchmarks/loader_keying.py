"""What the layout-invariant train loader costs: loader throughput with and without per-sample keys.

    .venv/bin/python benchmarks/loader_keying.py --batches 30 --out benchmarks/results/loader_keying.md

One process, ``num_workers=0``, the digits training set, global batch 32, three loaders:

* ``stock``: LiBai's ``CyclicSampler`` as ``batch_sampler`` (what "fast" mode reads with);
* ``global order``: ``GlobalOrderBatchSampler`` as a plain ``batch_sampler`` (the order alone);
* ``keyed``: ``GlobalOrderBatchSampler`` + ``KeyedAugmentation`` (what "layout_invariant" reads with).

Two augmentations: the CPU configs' recipe (``cifar_train_transform``: RandomCrop, flip, numpy
only) and a heavier one that also draws from OneFlow's CPU generator (RandomResizedCrop,
ColorJitter).  The loaders take turns batch by batch (``--batches`` rounds after one warm-up
batch each), so a shared host's load drifts hit all three alike; the table gives each loader's
median batch time as samples per second, and the ratio to stock.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

from report import publish  # benchmarks/report.py (scripts run from benchmarks/)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
GLOBAL_BATCH = 32


def augmentations():
    from flowvision import transforms as T

    from libai_ext.data import cifar_train_transform

    heavy = T.Compose([T.RandomResizedCrop(32, scale=(0.5, 1.0)), T.RandomHorizontalFlip(),
                       T.ColorJitter(brightness=0.4), T.ToTensor()])
    return {"recipe (RandomCrop, flip)": cifar_train_transform(32), "heavy (+ RandomResizedCrop, ColorJitter)": heavy}


def loaders(dataset):
    from libai.data.build import trivial_batch_collator
    from libai.data.samplers import CyclicSampler
    from oneflow.utils.data import DataLoader

    from libai_ext.data import GlobalOrderBatchSampler, KeyedAugmentation

    def order():
        return GlobalOrderBatchSampler(dataset, GLOBAL_BATCH, seed=0)

    return {
        "stock": lambda: DataLoader(dataset, batch_sampler=CyclicSampler(dataset, GLOBAL_BATCH, shuffle=True),
                                    collate_fn=trivial_batch_collator),
        "global order": lambda: DataLoader(dataset, batch_sampler=order(), collate_fn=trivial_batch_collator),
        "keyed": lambda: DataLoader(KeyedAugmentation(dataset, 0), sampler=order(), batch_size=None,
                                    collate_fn=trivial_batch_collator),
    }


def batch_seconds(builds, rounds):
    """{loader: [seconds per batch]}, the loaders taking turns one batch at a time."""
    iterators = {name: iter(build()) for name, build in builds.items()}
    for iterator in iterators.values():
        next(iterator)  # warm-up: the sampler's first permutation, first allocations
    times = {name: [] for name in builds}
    for _ in range(rounds):
        for name, iterator in iterators.items():
            start = time.perf_counter()
            next(iterator)
            times[name].append(time.perf_counter() - start)
    return times


def measure(rounds, data_root):
    from libai_ext.data import CIFAR100Folder, ensure_digits_cifar

    root = ensure_digits_cifar(data_root)
    rows = []
    for aug_name, transform in augmentations().items():
        times = batch_seconds(loaders(CIFAR100Folder(root, train=True, transform=transform)), rounds)
        rates = {name: sorted(GLOBAL_BATCH / t for t in values) for name, values in times.items()}
        medians = {name: statistics.median(values) for name, values in rates.items()}
        for name, median in medians.items():
            quartiles = statistics.quantiles(rates[name], n=4)
            rows.append((aug_name, name, median, quartiles[0], quartiles[2], median / medians["stock"]))
    return rows


def report(rows, args):
    lines = [f"One process, num_workers=0, global batch {GLOBAL_BATCH}, {args.batches} batches per loader, taking "
             "turns batch by batch; median (quartiles) samples/s per batch.", "",
             "| augmentation | loader | samples/s | quartiles | ratio to stock | ms per sample more than stock |",
             "|---|---|---|---|---|---|"]
    stock = {aug: median for aug, name, median, *_ in rows if name == "stock"}
    for aug, name, median, low, high, ratio in rows:
        extra = 1e3 / median - 1e3 / stock[aug]
        lines.append(f"| {aug} | {name} | {median:.0f} | {low:.0f}-{high:.0f} | {ratio:.2f}x | {extra:+.3f} |")
    return "\n".join(lines) + "\n"


def loader_arguments(doc):
    """``--batches``, ``--data``, ``--out``: the arguments of the loader benchmarks."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--batches", type=int, default=30, help="timed batches per loader")
    parser.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "libai_ext_digits"))
    parser.add_argument("--out", help="also write the table here (markdown)")
    return parser.parse_args()


def main():
    args = loader_arguments(__doc__)
    text = report(measure(args.batches, args.data), args)
    publish(text, args.out, title="Layout-invariant train loader: cost of the global order and per-sample keys")


if __name__ == "__main__":
    main()
