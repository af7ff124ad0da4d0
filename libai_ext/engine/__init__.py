"""The trainer and the batch path: ``ConsistentBatchTrainer`` (``trainer``), its model-side work on whatever
``build_model`` builds (``model_work``), every field made global on stage 0 and moved to its stage and reading on
stage 0 only (``batch``), LiBai's loaders with the global order (``global_loader``), a step's micro-batches
(``step_batches``, ``step_schedule``), the cross-rank batch check (``batch_check``), graph mode (``graph``), hooks and
raw losses (``hooks``, ``raw_losses``), a launched script's start-up (``launch``) and the equivalence tool's
recording (``module_recorder``).

May import every runtime folder (``checkpoint``, ``lifetime``, ``config``, ``random``, ``data``, ``compat``,
``models``); never ``cli`` or ``testing``.
"""
from ..compat.layout import placement_data_parallel_rank
from .batch import consistent_batch
from .graph import GraphBase, StepFedGraph, feed_step
from .trainer import ConsistentBatchTrainer

__all__ = ["ConsistentBatchTrainer", "GraphBase", "StepFedGraph", "consistent_batch", "feed_step",
           "placement_data_parallel_rank"]
