"""libai_ext: correctly paired batches and parallel-correct randomness for LiBai (0.1.1 and main).

Swap the trainer in a LiBai config (``train.trainer = "libai_ext.ConsistentBatchTrainer"``)
and launch ``tools/train_net.py`` with ``python -m oneflow.distributed.launch``.
"""
from .compat import apply_cpu_patches, apply_patches
from .engine import ConsistentBatchTrainer, GlobalMixup, mixup_step, seed_everything, seed_from_config
from .layers import DropPath, Dropout

__version__ = "0.1.0"
__all__ = ["ConsistentBatchTrainer", "DropPath", "Dropout", "GlobalMixup", "apply_cpu_patches", "apply_patches",
           "mixup_step", "seed_everything", "seed_from_config"]
