"""Where training starts: a checkpoint to resume, a finished run to continue, or initial weights (docs/resume.md).

LiBai 0.1.1 reads ``train.load_weight`` only under ``--resume`` when no checkpoint exists, so a run given initial
weights without it silently trains from random weights, and those differ between layouts.
``load_checkpoint_or_weights`` applies the rule LiBai documents, on every LiBai line: resume the last checkpoint when
asked and one exists, else load ``train.load_weight`` if set. "The last" (``choose_resume_checkpoint``) is the newest
committed, intact checkpoint; each one passed over is named in a warning with the reason.
"""
import logging
import os
import shutil
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from libai.config import try_get_key

from ..lifetime.agreement import agree_on, barrier
from .committed import checkpoint_problems
from .files import (
    LAST_CHECKPOINT, RETIRED_SUFFIX, CheckpointDamaged, checkpoint_name, is_retired, is_staging, numbered_iteration,
    read_last_checkpoint, read_manifest, write_last_checkpoint,
)

logger = logging.getLogger(__name__)


@dataclass
class ResumeChoice:
    """What ``--resume`` found in an output folder (``scan_for_resume``)."""

    pointer: Optional[str] = None  # what last_checkpoint named
    chosen: Optional[str] = None  # the checkpoint to resume; None: train from scratch
    unverified: bool = False  # chosen has no commit record (stock LiBai, libai_ext 0.1)
    skipped: List[Tuple[str, str]] = field(default_factory=list)  # (folder name, why)
    leftovers: List[str] = field(default_factory=list)  # interrupted saves and deletions, to remove
    restored: List[str] = field(default_factory=list)  # commits found only as <name>.retired, renamed back
    refusal: Optional[str] = None  # every checkpoint there is damaged


def scan_for_resume(output_dir, *, checksums):
    """The checkpoint ``--resume`` takes in ``output_dir``, and each one it passes over, with why.

    ``last_checkpoint``'s if committed and intact (it names the newest commit unless someone pointed it elsewhere), else
    the newest committed, intact one. Folders without a commit record (stock LiBai) count only where none has one,
    checked against their tensor files' ``meta``."""
    choice = ResumeChoice(pointer=read_last_checkpoint(output_dir))
    names = sorted(n for n in os.listdir(output_dir) if os.path.isdir(os.path.join(output_dir, n))) \
        if os.path.isdir(output_dir) else []
    retired = _retired_commits(output_dir, names, choice.pointer, checksums)
    choice.restored = sorted(retired)
    choice.leftovers = [n for n in names if (is_staging(n) or is_retired(n)) and n not in retired.values()]
    choice.skipped = [(n, "its save was interrupted before the commit") for n in names if is_staging(n)]
    names = sorted(set(names) - set(retired.values()) | set(retired))
    committed, legacy, unreadable = [], [], {}
    for name in names:
        folder = os.path.join(output_dir, retired.get(name, name))
        if is_staging(name) or is_retired(name):
            continue
        try:
            manifest = read_manifest(folder)
        except CheckpointDamaged as e:
            unreadable[name] = e.problems
            committed.append((-1, 0, name))
            continue
        if manifest is not None:
            iteration = manifest.get("iteration")
            committed.append((iteration if isinstance(iteration, int) else -1, numbered_iteration(name) is not None,
                              name))
        elif os.path.isdir(os.path.join(folder, "model")):
            iteration = numbered_iteration(name)
            legacy.append((-1 if iteration is None else iteration, True, name))
    candidates = [name for _, _, name in sorted(committed or legacy, reverse=True)]
    if choice.pointer is not None:
        if choice.pointer in names and not is_staging(choice.pointer) and not is_retired(choice.pointer):
            candidates = [choice.pointer] + [n for n in candidates if n != choice.pointer]
        else:
            choice.skipped.append((choice.pointer, f"{LAST_CHECKPOINT} names it, but there is no such folder"))
    damaged = []
    for name in candidates:
        problems = unreadable.get(name) or checkpoint_problems(os.path.join(output_dir, retired.get(name, name)),
                                                               checksums=checksums)
        if not problems:
            choice.chosen = name
            choice.unverified = all(name != n for _, _, n in committed)
            break
        damaged.append(name)
        choice.skipped.append((name, "damaged: " + "; ".join(problems)))
    if choice.chosen is None and damaged:
        choice.refusal = (f"--resume: no checkpoint in {output_dir} can be resumed: "
                          + " | ".join(f"{name}: {why}" for name, why in choice.skipped if name in damaged)
                          + ". Repair or remove them, or train without --resume.")
    return choice


def _retired_commits(output_dir, names, pointer, checksums):
    """{name: name.retired} for the commits a save of the same name was replacing when it stopped.

    A kill between ``replace_folder``'s two renames leaves the last commit of ``<name>`` only as ``<name>.retired``.
    It is taken back when ``<name>`` is missing, the copy is intact, and the name is saved again (``last_checkpoint``
    names it, or a name by role such as ``model_best``): a numbered ``.retired`` nothing names is a deletion stopped
    halfway."""
    found = {}
    for retired in names:
        name = retired[:-len(RETIRED_SUFFIX)]
        if not is_retired(retired) or name in names or (name != pointer and numbered_iteration(name) is not None):
            continue
        folder = os.path.join(output_dir, retired)
        try:
            intact = read_manifest(folder) is not None and not checkpoint_problems(folder, checksums=checksums)
        except CheckpointDamaged:
            intact = False
        if intact:
            found[name] = retired
    return found


def choose_resume_checkpoint(cfg):
    """Under ``--resume``, point ``last_checkpoint`` at the checkpoint to resume before LiBai reads it.

    Call on every rank before the trainer is built: rank 0 scans (``scan_for_resume``), every rank warns about each
    checkpoint passed over and raises the same error when all are damaged; interrupted saves are removed. Returns the
    ``ResumeChoice``."""
    if not try_get_key(cfg, "train.resume", default=False):
        return None
    output_dir = cfg.train.output_dir
    checksums = try_get_key(cfg, "train.checkpointer.checksums", default=True)
    choice = agree_on(0, lambda: scan_for_resume(output_dir, checksums=checksums))
    for name, reason in choice.skipped:
        logger.warning(f"--resume: skipping {os.path.join(output_dir, name)}: {reason}")
    if choice.refusal:
        raise RuntimeError(choice.refusal)
    if choice.chosen is None:
        logger.warning(f"--resume: no checkpoint found in {output_dir}: training from scratch")
    elif choice.unverified:
        logger.warning(f"--resume: {os.path.join(output_dir, choice.chosen)} has no commit record (written by stock "
                       "LiBai or libai_ext 0.1): only its tensor files' sizes were checked")
    if choice.chosen is not None and choice.chosen != choice.pointer:
        logger.warning(f"--resume: resuming {os.path.join(output_dir, choice.chosen)}, the newest intact checkpoint "
                       f"({LAST_CHECKPOINT} named {choice.pointer})")
    for name in choice.restored:
        logger.warning(f"--resume: {os.path.join(output_dir, name)} was being replaced when the run stopped: its last "
                       f"commit ({name}{RETIRED_SUFFIX}) takes its name back")
    agree_on(0, lambda: _apply(output_dir, choice))
    barrier()
    return choice


def _apply(output_dir, choice):
    for name in choice.restored:
        os.rename(os.path.join(output_dir, name + RETIRED_SUFFIX), os.path.join(output_dir, name))
    pointer = os.path.join(output_dir, LAST_CHECKPOINT)
    if choice.chosen is not None and choice.chosen != choice.pointer:
        write_last_checkpoint(output_dir, choice.chosen)
    elif choice.chosen is None and os.path.exists(pointer):
        os.remove(pointer)  # it names nothing that can be resumed: LiBai must not read it
    for name in choice.leftovers:
        shutil.rmtree(os.path.join(output_dir, name), ignore_errors=True)


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


def continue_finished_run(cfg):
    """Let ``--resume`` continue from a checkpoint named by role, e.g. a finished run's ``model_final``.

    LiBai resumes by the iteration in the name (0.1.1 crashes on ``int('final')``, main refuses), so the checkpoint of
    iteration N becomes ``model_<N>`` with its random state: ``model_final`` is renamed (the continued run saves its
    own), any other copied, and ``last_checkpoint`` names it. Call on every rank before the trainer reads it."""
    import oneflow as flow

    output_dir = cfg.train.output_dir
    if not try_get_key(cfg, "train.resume", default=False):
        return
    name = read_last_checkpoint(output_dir)
    if name is None or name.rpartition("_")[2].isdigit():
        return
    last_iter = checkpoint_iteration(os.path.join(output_dir, name))
    if cfg.train.train_iter <= last_iter + 1 and not try_get_key(cfg, "train.train_epoch", default=0):
        raise ValueError(f"train.train_iter={cfg.train.train_iter}: the run in {output_dir!r} already trained "
                         f"up to iteration {last_iter} ({name}); set train.train_iter above {last_iter + 1} "
                         "to continue it")
    numbered = checkpoint_name(last_iter)
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
    write_last_checkpoint(output_dir, numbered)
