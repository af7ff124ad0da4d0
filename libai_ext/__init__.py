"""libai_ext: correctly paired batches and parallel-correct randomness for LiBai (0.1.1 and main).

Swap the trainer in a LiBai config (``train.trainer = "libai_ext.ConsistentBatchTrainer"``)
and launch ``libai-ext-train`` (or ``tools/train_net.py`` in a checkout) with
``python -m oneflow.distributed.launch``.

The public names below are imported on first use: ``import libai_ext`` alone loads neither
OneFlow nor LiBai, so the command-line tools (``libai_ext.cli``) answer ``--help`` at once and
without OneFlow's start-up messages.
"""
import importlib

__version__ = "0.2.0.dev0"

# public name -> the module that defines it
_EXPORTS = {
    "apply_patches": ".compat", "applied_patches": ".compat", "restoring_patches": ".compat",
    "ConsistentBatchTrainer": ".engine", "feed_step": ".engine", "StepFedGraph": ".engine",
    "CheckpointDamaged": ".checkpoint.files", "CommittedCheckpointer": ".checkpoint.committed",
    "die_with_launcher": ".lifetime.launcher",
    "GlobalOrderBatchSampler": ".random.global_order", "KeyedAugmentation": ".random.keyed_dataset",
    "GlobalMixup": ".random.global_mixup", "mixup_step": ".random.global_mixup",
    "seed_everything": ".random", "seed_from_config": ".random",
    "DropPath": ".random.layers", "Dropout": ".random.layers", "UnkeyedGraphDraw": ".random.layers",
    "convert_stochastic_layers": ".random.layers", "watch_model": ".random.layers.stochastic_ops",
    "build_with_seeded_init": ".random", "recording_init": ".random", "reinitialize": ".random",
    "watch_late_parameters": ".random", "drawing_step": ".random.draws", "Step": ".random.draws",
}
_SUBPACKAGES = ("checkpoint", "cli", "compat", "config", "data", "engine", "lifetime", "models", "random", "testing")
__all__ = sorted(_EXPORTS, key=str.lower)


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    elif name in _SUBPACKAGES:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS) | set(_SUBPACKAGES))
