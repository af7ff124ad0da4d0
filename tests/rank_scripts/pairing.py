"""On every rank: build a rank-dependent local batch, run get_batch, check image/label pairing.

Each sample's image is filled with its id, and its label is the id (no mixup) or the
mixed-up soft one-hot of ids (mixup, no smoothing), so on a correctly paired batch
``image value == sum_c label[c] * c``.  Ranks hold different ids and different numpy
seeds, as under LiBai with unseeded per-rank augmentation.  Writes one record per
(trainer, mixup) case from each stage-0 rank.
"""
import numpy as np
import oneflow as flow
from flowvision.data import Mixup
from libai.data.structures import DistTensorData, Instance
from libai.engine import DefaultTrainer

from common import layout_parser, on_stage0, replicated_on_stage0, setup_layout
from libai_ext import ConsistentBatchTrainer
from libai_ext.compat.get_batch_api import call_get_batch
from libai_ext.testing import write_rank_result

NUM_CLASSES = 64
MICRO_BATCH = 4
TRAINERS = {"stock": DefaultTrainer, "fixed": ConsistentBatchTrainer}


def local_batch(rank, dp, with_aux):
    ids = np.arange(MICRO_BATCH * dp) + rank * MICRO_BATCH * dp
    ids = flow.tensor(ids % NUM_CLASSES, dtype=flow.int64)
    images = ids.to(flow.float32).reshape(-1, 1, 1, 1).expand(-1, 3, 4, 4).contiguous()
    fields = {
        "images": DistTensorData(images, placement_idx=0),
        "labels": DistTensorData(ids, placement_idx=-1),
    }
    if with_aux:  # a third field on stage 1 (placement_idx 1)
        fields["aux"] = DistTensorData(ids.clone(), placement_idx=1)
    return Instance(**fields)


def label_ids(labels):
    if labels.ndim == 1:
        return labels.numpy().astype(np.float64)
    return (labels.numpy() * np.arange(labels.shape[-1])).sum(-1)


def main():
    parser = layout_parser()
    parser.add_argument("--aux", action="store_true")
    args = parser.parse_args()
    setup_layout(args)
    rank = flow.env.get_rank()
    np.random.seed(1234 + rank)  # unseeded augmentation: a different numpy stream per rank
    mixup = Mixup(mixup_alpha=1.0, cutmix_alpha=0.0, prob=1.0, label_smoothing=0.0, num_classes=NUM_CLASSES)
    for name, trainer in TRAINERS.items():
        for use_mixup in (False, True):
            data = local_batch(rank, args.dp, args.aux)
            batch = call_get_batch(trainer.get_batch, data, mixup if use_mixup else None)
            gathered = {k: replicated_on_stage0(v) for k, v in batch.items()}
            if not on_stage0():
                continue
            image_ids = gathered["images"][:, 0, 0, 0].numpy().astype(np.float64)
            record = dict(
                trainer=name, mixup=use_mixup,
                image_ids=image_ids.tolist(),
                label_ids=label_ids(gathered["labels"]).tolist(),
                fields_left_local=all(not f.tensor.is_global for f in data.get_fields().values()),
                placements={k: str(v.placement) for k, v in batch.items()},
            )
            if args.aux:
                record["aux_ids"] = gathered["aux"].numpy().astype(np.float64).tolist()
            write_rank_result(**record)


if __name__ == "__main__":
    main()
