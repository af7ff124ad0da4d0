"""On every rank: one synthetic pre-mix global batch through ConsistentBatchTrainer.get_batch with mixup.

The global batch (32 images 3x8x8, labels) is synthetic and the same on every layout; each
rank gets its data-parallel shard as its local batch, as a sampler following the placement
would give it.  For both ``train.randomness`` modes, at a step that mixes up and one that
cuts and mixes, stage-0 ranks record digests of the whole mixed global batch; every rank
writes one record per (mode, step), so a silent rank is noticed.  Numpy is seeded the same on
every rank: the local ("fast") mixup then draws the same λ everywhere, and differs from one
rank only by whom it pairs.
"""
import hashlib

import numpy as np
import oneflow as flow
from flowvision.data import Mixup
from libai.data.structures import DistTensorData, Instance

from common import get_batch, layout_parser, on_stage0, replicated_on_stage0, run_or_die, setup_layout
from libai_ext import ConsistentBatchTrainer, seed_everything
from libai_ext.compat.layout import layout_coordinates
from libai_ext.random.global_mixup import draw_mix, mixup_options
from libai_ext.testing import write_rank_result

GLOBAL_BATCH, NUM_CLASSES, IMAGE = 32, 10, (3, 8, 8)
SEED = 7
MODES = ("layout_invariant", "fast")


def recipe():
    return Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1, num_classes=NUM_CLASSES)


def steps_of_each_kind():
    """{"mixup": first step whose global draw mixes up, "cutmix": first that cuts and mixes}."""
    options, found = mixup_options(recipe()), {}
    for step in range(100):
        draw = draw_mix(options, SEED, step, IMAGE[1:])
        found.setdefault("cutmix" if draw.use_cutmix else "mixup" if draw.mixes else "none", step)
    return {kind: found[kind] for kind in ("mixup", "cutmix")}


def local_batch(dp):
    """This rank's shard of the synthetic global batch (its data-parallel index's rows)."""
    rng = np.random.RandomState(0)
    images = rng.randn(GLOBAL_BATCH, *IMAGE).astype(np.float32)
    labels = rng.randint(0, NUM_CLASSES, size=GLOBAL_BATCH)
    rows = slice(layout_coordinates(flow.env.get_rank())[1] * GLOBAL_BATCH // dp,
                 (layout_coordinates(flow.env.get_rank())[1] + 1) * GLOBAL_BATCH // dp)
    return Instance(images=DistTensorData(flow.tensor(images[rows]), placement_idx=0),
                    labels=DistTensorData(flow.tensor(labels[rows]), placement_idx=-1))


def digest(array):
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def mixed_records(dp):
    """One record per (mode, step) on this rank: digests of the mixed global batch on stage 0."""
    records = []
    for mode in MODES:
        seed_everything(SEED, scope="global", randomness=mode)
        for kind, step in steps_of_each_kind().items():
            batch = get_batch(ConsistentBatchTrainer, local_batch(dp), recipe(), step=step)
            gathered = {k: replicated_on_stage0(v) for k, v in batch.items()}
            record = dict(mode=mode, kind=kind, step=step, stage0=on_stage0())
            if on_stage0():
                record.update(images=digest(gathered["images"].numpy()), labels=digest(gathered["labels"].numpy()),
                              labels_shape=list(gathered["labels"].shape))
            records.append(record)
    return records


def main():
    args = layout_parser().parse_args()
    setup_layout(args)
    for record in mixed_records(args.dp):
        write_rank_result(**record)


if __name__ == "__main__":
    run_or_die(main)
