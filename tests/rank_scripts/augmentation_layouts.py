"""On every rank: per-sample digests of every random transform flowvision ships, read through LiBai's real loader.

``augmentation_cases.AllCases`` (the first 64 digits, each sample run through every case) is read by the train
loader each trainer builds (``build_train_loader``), with each of ``--workers`` loader worker counts in turn (one
launch for them all), a global batch of 16.  Before
each batch a chain of matmuls on a global tensor is queued, as a training step's work would be: on a rank other than
the first, its local part runs on another stream than ``flow.empty``'s (docs/upstream-bugs.md #30).  Variants:

* ``layout_invariant``: ``ConsistentBatchTrainer``, steps 0 and 1;
* ``resume``: the same, started from LiBai's ``consumed_samples`` after step 0 (what ``--resume`` sets), step 1;
* ``stock``: LiBai's ``DefaultTrainer`` (each rank seeded ``seed + rank``, as LiBai main's train_net does), step 0.

Each rank reports, per worker count, variant and step, the indices it read and each sample's digests (one per case).
"""
import oneflow as flow
from libai.config import LazyCall
from libai.engine import DefaultTrainer

from augmentation_cases import CASES, AllCases
from common import image_loader_config, layout_parser, run_or_die, setup_layout
from libai_ext import ConsistentBatchTrainer, seed_everything
from libai_ext.data import ensure_digits_cifar
from libai_ext.random.layers.stochastic_ops import route_stochastic_ops
from libai_ext.testing import write_rank_result

GLOBAL_BATCH = 16
SEED = 1234


def busy():
    """A training step's worth of queued work on this rank's global-tensor stream (it draws nothing): matmuls on
    a split tensor, each followed by a gather across the ranks."""
    placement = flow.env.all_device_placement("cpu")
    weight = flow.ones(400, 400, placement=placement, sbp=flow.sbp.broadcast) * 1e-3
    x = flow.ones(400, 400, placement=placement, sbp=flow.sbp.split(0))
    for _ in range(6):
        x = flow.matmul(x, weight).to_global(sbp=flow.sbp.broadcast).to_global(sbp=flow.sbp.split(0))
    return x


def read(variant, trainer, cfg, steps, first=0):
    batches = iter(trainer.build_train_loader(cfg)[0])
    for step in range(first, max(steps) + 1):
        pending = busy()
        data = next(batches)
        if step in steps:
            write_rank_result(variant=variant, workers=cfg.dataloader.train.num_workers, step=step, indices=data.get("indices").tensor.numpy().tolist(),
                              digests=data.get("digests").tensor.numpy().tolist())
        pending.to_local().numpy()


def main():
    parser = layout_parser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--workers", type=int, nargs="+", default=[0])
    args = parser.parse_args()
    setup_layout(args)
    ensure_digits_cifar(args.data)
    micro = GLOBAL_BATCH // args.dp

    def config(randomness, workers, consumed=None):
        cfg = image_loader_config(LazyCall(AllCases)(root=args.data), micro, randomness=randomness)
        cfg.dataloader.train.num_workers = workers
        if consumed is not None:
            cfg.dataloader.consumed_samples = consumed
        return cfg

    route_stochastic_ops()  # as ConsistentBatchTrainer does before it builds its loaders
    for workers in args.workers:
        seed_everything(SEED)
        read("layout_invariant", ConsistentBatchTrainer, config("layout_invariant", workers), [0, 1])
        seed_everything(SEED)
        read("resume", ConsistentBatchTrainer, config("layout_invariant", workers, consumed=GLOBAL_BATCH), [1], first=1)
        seed_everything(SEED, scope="rank", randomness="fast")
        read("stock", DefaultTrainer, config("fast", workers), [0])
    write_rank_result(variant="summary", cases=list(CASES))


if __name__ == "__main__":
    run_or_die(main)
