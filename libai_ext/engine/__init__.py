"""The trainer and the batch path: ``ConsistentBatchTrainer`` (``trainer``), its model-side work on whatever
``build_model`` builds, a subclass's own included (``model_work``), every field made global on stage 0
and moved to its stage (``batch``), LiBai's loaders with the global order and first-stage-only reading
(``global_loader``, ``stage0_loading``), a step's micro-batches (``step_batches``, ``step_schedule``), the check
of a batch across ranks (``batch_check``), graph mode (``graph``), the trainer's hooks and raw losses (``hooks``,
``raw_losses``), the start-up a launched script runs (``launch``) and the recording the equivalence tool reads
(``module_recorder``).

May import every runtime folder (``checkpoint``, ``lifetime``, ``config``, ``random``, ``data``, ``compat``,
``models``); never ``cli`` or ``testing``.
"""
from ..compat.layout import placement_data_parallel_rank
from .batch import consistent_batch
from .graph import GraphBase, StepFedGraph, feed_step
from .trainer import ConsistentBatchTrainer

__all__ = ["ConsistentBatchTrainer", "GraphBase", "StepFedGraph", "consistent_batch", "feed_step",
           "placement_data_parallel_rank"]
