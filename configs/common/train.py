"""The ``train`` namespace that LiBai's DefaultTrainer reads, 0.1.1 and main (pip's libai ships no configs/)."""
import oneflow as flow
from omegaconf import DictConfig

from libai.config import LazyCall
from libai.evaluation import ClsEvaluator
from libai.scheduler import WarmupCosineLR

# This host's device kind: where the layers and the inputs live.
DEVICE = "cuda" if flow.cuda.is_available() else "cpu"

train = DictConfig(dict(
    output_dir="./output",
    # The trainer tools/train_net.py builds; "libai.engine.DefaultTrainer" reproduces stock LiBai.
    trainer="libai_ext.ConsistentBatchTrainer",
    # Seeded on every rank before the trainer is built (libai_ext.seed_everything).
    seed=1234,
    # "global": the same streams on every rank; see docs/randomness.md "Seeding scopes".
    seed_scope="global",
    # Every random number of training: "layout_invariant" draws initial weights, data order,
    # augmentation, mixup, dropout and every other random op of a forward from the seed and global
    # positions, the same on any layout; "fast" keeps LiBai's sampler, OneFlow's initialisation and
    # OneFlow's own kernels, seeded from the seed (dropout also from the rank's place on the axes its
    # tensor is split over): reproducible on one layout only.  See docs/randomness.md.
    randomness="layout_invariant",
    # Compare each field's local batch across the ranks that must agree: "off", "first" (one
    # small all-gather, once) or "every" step.  Works with stock DefaultTrainer too.
    batch_check="off",
    # ConsistentBatchTrainer under pipeline parallelism: only stage 0 reads and augments samples.
    stage0_only_loading=True,
    # Samples per data-parallel rank per step; global = micro * dp * accumulation.
    train_micro_batch_size=32,
    global_batch_size=None,
    num_accumulation_steps=None,
    train_iter=10000,
    train_epoch=0,  # if set, train_iter = max(train_iter, epochs worth of iterations)
    warmup_ratio=0,
    start_iter=0,
    amp=dict(enabled=False),
    activation_checkpoint=dict(enabled=False),
    zero_optimization=dict(enabled=False, stage=1),
    nccl_fusion_threshold_mb=16,
    nccl_fusion_max_ops=24,
    # max_to_keep: periodic checkpoints kept (libai_ext deletes older ones once a newer one is committed);
    # checksums: record and check a CRC-32 of every checkpoint file (sizes are always checked).
    checkpointer=dict(period=5000, max_to_keep=100, checksums=True),
    # On one of these signals the ranks stop together after the next step, commit a checkpoint of it and exit with
    # code 143; grace_s bounds it all (docs/checkpoints.md#preemption).
    preemption=dict(enabled=True, signals=["SIGTERM", "SIGUSR1"], grace_s=25),
    test_micro_batch_size=32,
    evaluation=dict(
        enabled=True,
        evaluator=LazyCall(ClsEvaluator)(topk=(1, 5)),
        eval_period=5000,
        eval_iter=1e5,
        eval_metric="Acc@1",
        eval_mode="max",
    ),
    load_weight="",
    log_period=20,
    scheduler=LazyCall(WarmupCosineLR)(warmup_factor=0.001, alpha=0.01, warmup_method="linear"),
    # Read by LiBai main only (0.1.1 ignores them).  Inputs on the layers' device; RDMA needs
    # InfiniBand (set True on such a cluster to speed up pipeline transfers).
    input_placement_device=DEVICE,
    rdma_enabled=False,
    dist=dict(data_parallel_size=1, tensor_parallel_size=1, pipeline_parallel_size=1, device_type=DEVICE),
))
