"""Where training starts: a checkpoint to resume, a finished run to continue, or initial weights.

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
import shutil

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


FINAL_CHECKPOINT = "model_final"


def checkpoint_iteration(checkpoint_dir):
    """The iteration after which a checkpoint was saved: its LR scheduler's step count minus one.

    LiBai names some checkpoints by role (``model_final``, ``model_best``) and does not save
    their iteration; the scheduler state it saves counts one step per iteration (``last_step``).
    """
    import oneflow as flow

    path = os.path.join(checkpoint_dir, "lr_scheduler")
    state = flow.load(path) if os.path.exists(path) else None
    if not isinstance(state, dict) or not isinstance(state.get("last_step"), int):
        raise ValueError(f"cannot resume {checkpoint_dir!r}: {path} holds no scheduler step count (last_step) "
                         "to tell the iteration it was saved at")
    return state["last_step"] - 1


def _read(path):
    with open(path) as f:
        return f.read().strip()


def continue_finished_run(cfg):
    """Let ``--resume`` continue from a checkpoint named by role, e.g. a finished run's ``model_final``.

    LiBai resumes ``last_checkpoint`` by the iteration in its name: on ``model_final`` (or
    ``model_best``, tagged last when the final evaluation was the best) 0.1.1 crashes on
    ``int('final')`` and LiBai main refuses.  That checkpoint is the checkpoint of some
    iteration N, so it becomes ``model_<N>`` (with its per-rank random state):
    ``model_final`` is renamed (the continued run saves its own), any other is copied, and
    ``last_checkpoint`` names it; LiBai then resumes it like any other.  Call on every rank
    before the trainer reads ``last_checkpoint``.
    """
    import oneflow as flow

    output_dir = cfg.train.output_dir
    tag = os.path.join(output_dir, "last_checkpoint")
    if not try_get_key(cfg, "train.resume", default=False) or not os.path.isfile(tag):
        return
    name = _read(tag)
    if name.rpartition("_")[2].isdigit():
        return
    last_iter = checkpoint_iteration(os.path.join(output_dir, name))
    if cfg.train.train_iter <= last_iter + 1 and not try_get_key(cfg, "train.train_epoch", default=0):
        raise ValueError(f"train.train_iter={cfg.train.train_iter}: the run in {output_dir!r} already trained "
                         f"up to iteration {last_iter} ({name}); set train.train_iter above {last_iter + 1} "
                         "to continue it")
    numbered = f"model_{last_iter:07d}"
    flow.comm.barrier()  # every rank has read last_checkpoint before rank 0 rewrites it
    if flow.env.get_rank() == 0:
        _number_checkpoint(output_dir, name, numbered)
        logger.info(f"resuming {name} of {output_dir} as {numbered} (iteration {last_iter})")
    flow.comm.barrier()


def _number_checkpoint(output_dir, name, numbered):
    # A periodic checkpoint of the same iteration may already exist: it holds the same state.
    for folder in (output_dir, os.path.join(output_dir, "rng_state")):  # rng_state: see rng_state.py
        source, target = os.path.join(folder, name), os.path.join(folder, numbered)
        if not os.path.isdir(source) or os.path.exists(target):
            continue
        if name == FINAL_CHECKPOINT:
            os.rename(source, target)
        else:
            shutil.copytree(source, target)
    with open(os.path.join(output_dir, "last_checkpoint"), "w") as f:
        f.write(numbered)
