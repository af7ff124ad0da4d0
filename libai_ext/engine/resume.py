"""Where training starts: a checkpoint to resume, or initial weights to load.

LiBai 0.1.1's ``DefaultTrainer.resume_or_load`` reads ``train.load_weight`` only under
``--resume`` when no checkpoint exists: a run given initial weights without ``--resume``
silently trains from its own random initialisation.  Random initial weights depend on the
layout (OneFlow's global random draws differ between 1 rank and tp2), so two layouts
"started from one shared checkpoint" that way diverge from iteration 0.
``load_checkpoint_or_weights`` states the rule LiBai documents, on every LiBai line:
resume everything from the last checkpoint when asked and one exists, otherwise load the
model weights of ``train.load_weight`` if it is set.
"""
import logging
import os

from libai.config import try_get_key

logger = logging.getLogger(__name__)


def load_checkpoint_or_weights(trainer, resume):
    """Resume ``trainer`` from ``<output_dir>/last_checkpoint`` or load ``train.load_weight``."""
    checkpointer = trainer.checkpointer
    if resume and checkpointer.has_checkpoint():
        extra = checkpointer.resume_or_load(None, resume=True)
        saved_iter = extra.get("iter", -1)
        if trainer.start_iter != saved_iter + 1:
            raise RuntimeError(
                f"resumed checkpoint {checkpointer.get_checkpoint_file()!r} holds iteration {saved_iter}, "
                f"but the trainer starts at iteration {trainer.start_iter}")
        return
    weights = try_get_key(trainer.cfg, "train.load_weight", default="") or ""
    if not weights:
        return
    if not os.path.isdir(weights):
        raise FileNotFoundError(f"train.load_weight={weights!r} is not a checkpoint folder "
                                "(expected e.g. <output_dir>/model_final)")
    checkpointer.load(weights, checkpointables=[])
