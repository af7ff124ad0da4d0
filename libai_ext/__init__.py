"""libai_ext: correctly paired batches and parallel-correct randomness for LiBai (0.1.1 and main).

Swap the trainer in a LiBai config (``train.trainer = "libai_ext.ConsistentBatchTrainer"``)
and launch ``tools/train_net.py`` with ``python -m oneflow.distributed.launch``.
"""
from .compat import apply_cpu_patches, apply_patches
from .data import GlobalOrderBatchSampler, KeyedAugmentation
from .engine import (
    CheckpointDamaged, CommittedCheckpointer, ConsistentBatchTrainer, GlobalMixup, die_with_launcher, mixup_step,
    seed_everything, seed_from_config,
)
from .layers import DropPath, Dropout
from .random import build_with_seeded_init, recording_init, reinitialize

__version__ = "0.1.0"
__all__ = ["CheckpointDamaged", "CommittedCheckpointer", "ConsistentBatchTrainer", "DropPath", "Dropout", "GlobalMixup",
           "GlobalOrderBatchSampler", "KeyedAugmentation", "apply_cpu_patches", "apply_patches", "build_with_seeded_init",
           "die_with_launcher", "mixup_step", "recording_init", "reinitialize", "seed_everything", "seed_from_config"]
