from .batch import consistent_batch
from .graph import GraphBase
from .seeding import seed_everything, seed_from_config
from .trainer import ConsistentBatchTrainer, placement_data_parallel_rank

__all__ = [
    "ConsistentBatchTrainer",
    "GraphBase",
    "consistent_batch",
    "placement_data_parallel_rank",
    "seed_everything",
    "seed_from_config",
]
