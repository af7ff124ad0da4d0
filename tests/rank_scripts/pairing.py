"""On every rank: build the local batch LiBai's loader would give it, run get_batch, check pairing.

Each sample's image is filled with its id, and its label is the id (no mixup) or the
mixed-up soft one-hot of ids (mixup, no smoothing), so on a correctly paired batch
``image value == sum_c label[c] * c``.

Which samples a rank holds is what the trainer's sampler gives it, as in a real run:
shard ``dist.get_data_parallel_rank()`` for stock LiBai, the placement's data-parallel
index for ``ConsistentBatchTrainer`` (its loaders use that).  So at dp=1 every rank holds
the same samples, as in real LiBai.  Each rank has its own numpy stream, as under LiBai
with unseeded (0.1.1) or ``seed + rank`` (main) seeding, so mixup differs per rank.

The ``synthetic`` case is NOT what LiBai produces: every rank holds different samples.
It is run with ConsistentBatchTrainer only, to show that every field comes from stage 0
whatever the other stages hold (what stage-0-only loading relies on).

Writes one record per (trainer, mixup) case from each stage-0 rank, none elsewhere (``check="pairing"``).  In the
same launch, over the digits in ``--data``: ``--real-loader``, LiBai's own loader over real data (real_loader.py);
``--stage0-loading``, the same pipeline with and without stage-0-only loading (stage0_loading.py).
"""
import numpy as np
import oneflow as flow
from flowvision.data import Mixup
from libai.data.structures import DistTensorData, Instance
from libai.engine import DefaultTrainer
from libai.utils import distributed as dist

from common import get_batch, layout_parser, on_stage0, replicated_on_stage0, setup_layout
from libai_ext import ConsistentBatchTrainer
from libai_ext.data import ensure_digits_cifar
from libai_ext.engine import placement_data_parallel_rank
from libai_ext.testing import write_rank_result
import real_loader
import stage0_loading

NUM_CLASSES = 64
MICRO_BATCH = 4
# name: (trainer, the shard of samples this rank's sampler reads)
CASES = {
    "stock": (DefaultTrainer, lambda: dist.get_data_parallel_rank()),
    "fixed": (ConsistentBatchTrainer, placement_data_parallel_rank),
    "synthetic": (ConsistentBatchTrainer, flow.env.get_rank),  # rank-dependent: not LiBai's batches
}
RECORDS_PER_STAGE0_RANK = 2 * len(CASES)  # each case with and without mixup


def local_batch(shard, dp, with_aux):
    """The samples of sampler shard ``shard``: ids ``shard * n ... shard * n + n - 1``."""
    ids = np.arange(MICRO_BATCH * dp) + shard * MICRO_BATCH * dp
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
    parser.add_argument("--data", default="", help="the digits folder of --real-loader and --stage0-loading")
    parser.add_argument("--real-loader", action="store_true")
    parser.add_argument("--stage0-loading", action="store_true")
    args = parser.parse_args()
    setup_layout(args)
    rank = flow.env.get_rank()
    np.random.seed(1234 + rank)  # unseeded augmentation: a different numpy stream per rank
    mixup = Mixup(mixup_alpha=1.0, cutmix_alpha=0.0, prob=1.0, label_smoothing=0.0, num_classes=NUM_CLASSES)
    for name, (trainer, shard) in CASES.items():
        for use_mixup in (False, True):
            data = local_batch(shard(), args.dp, args.aux)
            batch = get_batch(trainer, data, mixup if use_mixup else None)
            gathered = {k: replicated_on_stage0(v) for k, v in batch.items()}
            if not on_stage0():
                continue
            image_ids = gathered["images"][:, 0, 0, 0].numpy().astype(np.float64)
            record = dict(
                check="pairing", trainer=name, mixup=use_mixup,
                image_ids=image_ids.tolist(),
                label_ids=label_ids(gathered["labels"]).tolist(),
                fields_left_local=all(not f.tensor.is_global for f in data.get_fields().values()),
                placements={k: str(v.placement) for k, v in batch.items()},
            )
            if args.aux:
                record["aux_ids"] = gathered["aux"].numpy().astype(np.float64).tolist()
            write_rank_result(**record)
    if args.real_loader or args.stage0_loading:
        ensure_digits_cifar(args.data)
    if args.real_loader:
        real_loader.report(args.data)
    if args.stage0_loading:
        stage0_loading.report(args.data)


if __name__ == "__main__":
    main()
