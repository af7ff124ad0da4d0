"""The trainer and what runs around it: the batch path, checkpoint and resume, process lifetime (launch,
preemption, the launcher's end, collectives), config checks and graph mode (docs/architecture.md).

May import ``compat``, ``random``, ``layers``, ``data`` and the top-level modules; never ``cli`` or ``testing``.
"""
from .batch import consistent_batch
from .checkpoint import CommittedCheckpointer, CommittedPeriodicCheckpointer
from .checkpoint_files import CheckpointDamaged
from .global_mixup import GlobalMixup, mixup_step
from .graph import GraphBase, StepFedGraph, feed_step
from .launcher_lifetime import die_with_launcher
from ..compat.layout import placement_data_parallel_rank
from ..random import seed_everything, seed_from_config
from .trainer import ConsistentBatchTrainer

__all__ = [
    "CheckpointDamaged",
    "CommittedCheckpointer",
    "CommittedPeriodicCheckpointer",
    "ConsistentBatchTrainer",
    "GlobalMixup",
    "GraphBase",
    "StepFedGraph",
    "consistent_batch",
    "die_with_launcher",
    "feed_step",
    "mixup_step",
    "placement_data_parallel_rank",
    "seed_everything",
    "seed_from_config",
]
