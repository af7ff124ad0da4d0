from .batch import consistent_batch
from .global_mixup import GlobalMixup, mixup_step
from .graph import GraphBase
from ..compat.layout import placement_data_parallel_rank
from ..random import seed_everything, seed_from_config
from .trainer import ConsistentBatchTrainer

__all__ = [
    "ConsistentBatchTrainer",
    "GlobalMixup",
    "GraphBase",
    "consistent_batch",
    "mixup_step",
    "placement_data_parallel_rank",
    "seed_everything",
    "seed_from_config",
]
