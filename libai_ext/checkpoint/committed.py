"""Checkpoints that commit atomically: a save is complete under its name, or not there at all.

LiBai's ``Checkpointer.save`` writes in place and every rank then writes ``last_checkpoint``, so a kill can leave it
naming a folder rank 0 is still filling. ``CommittedCheckpointer`` saves through LiBai's own code under
``<name>.uncommitted``; once every rank's part is written (barrier), rank 0 writes the manifest, flushes, renames the
folder ``<name>`` (the commit) and only then moves ``last_checkpoint``. ``CommittedPeriodicCheckpointer`` deletes old
checkpoints only once a newer one is committed. Protocol and folder layout: docs/checkpoints.md.
"""
import logging
import os
import shutil

import oneflow as flow
from libai.config import try_get_key
from libai.engine import hooks

from ..lifetime.agreement import agree_on, barrier
from ..lifetime.fault_points import fault_point, weights_being_written
from .files import (
    EXTENSION_ENTRY, MANIFEST, RETIRED_SUFFIX, CheckpointDamaged, build_manifest, checkpoint_name, fsync_dir,
    flush_to_disk, manifest_problems, read_last_checkpoint, read_manifest, rng_state_path, staging_name,
    tensor_file_problems, write_json_atomically, write_last_checkpoint,
)
from .rng_state import RNGStateCheckpointer

logger = logging.getLogger(__name__)


class CommittedCheckpointer(RNGStateCheckpointer):
    """LiBai's Checkpointer (model, optimizer, scheduler) plus every rank's random state, each save
    committed atomically.  ``checksums`` (``train.checkpointer.checksums``): record and check a
    CRC-32 of every file; sizes are recorded and checked always."""

    def __init__(self, model, save_dir="", *, checksums=True, save_to_disk=True, **checkpointables):
        super().__init__(model, save_dir, save_to_disk=save_to_disk, **checkpointables)
        self.checksums = bool(checksums)
        self._saving = None  # the checkpoint being saved, while its parts are written
        self._tag_wanted = False
        self.last_commit = None  # (name, iteration) of the last checkpoint this process committed

    @classmethod
    def wrapping(cls, checkpointer, checksums=True):
        return cls(checkpointer.model, checkpointer.save_dir, checksums=checksums,
                   save_to_disk=checkpointer.save_to_disk, **checkpointer.checkpointables)

    # --- saving -----------------------------------------------------------------------------

    @staticmethod
    def name_of(iteration):
        """The folder name of ``iteration``'s checkpoint (LiBai's)."""
        return checkpoint_name(iteration)

    def save_iteration(self, iteration):
        """Commit ``iteration``'s checkpoint unless this process committed it already (a periodic save of the
        same step); ``(its path, whether it was there already)``."""
        name = checkpoint_name(iteration)
        reused = self.last_commit == (name, iteration)
        if not reused:
            self.save(name, iteration=iteration)
        return os.path.join(self.save_dir, name), reused

    def save(self, name, **kwargs):
        if os.path.basename(name) != name:
            raise ValueError(f"checkpoint name {name!r}: a folder name inside {self.save_dir!r} is expected")
        staged = os.path.join(self.save_dir, staging_name(name))
        if flow.env.get_rank() == 0 and os.path.exists(staged):
            shutil.rmtree(staged)  # an interrupted earlier save of the same name
        barrier()  # no rank writes into the folder before it is clear
        fault_point("before_weights", name)
        self._saving, self._tag_wanted = name, False
        try:
            with weights_being_written(name):
                super().save(staging_name(name), **kwargs)  # LiBai's entries, then save_random_state
            fault_point("before_commit", name)
            barrier()  # every rank's part is written
            iteration = kwargs.get("iteration", self._scheduler_iteration())
            agree_on(0, lambda: self._commit(name, iteration, self._tag_wanted))
            barrier()  # nobody reads last_checkpoint, or saves again, before the commit is done
            self.last_commit = (name, iteration)
        finally:
            self._saving = None
        fault_point("after_commit", name)

    def save_random_state(self, name):
        fault_point("after_weights", self._saving)
        super().save_random_state(name)

    def rng_state_file(self, checkpoint_path, rank=None):
        """Inside the checkpoint folder; a checkpoint of libai_ext 0.1 keeps it in ``<save_dir>/rng_state``."""
        rank = flow.env.get_rank() if rank is None else rank
        folder = os.path.join(self.save_dir, os.path.basename(os.path.normpath(checkpoint_path)))
        inside = rng_state_path(folder, rank)
        if self._saving is None and not os.path.exists(inside):
            previous = super().rng_state_file(checkpoint_path, rank)
            if os.path.exists(previous):
                return previous
        return inside

    def tag_last_checkpoint(self, last_filename_basename):
        if self._saving is not None:
            # LiBai tags from inside save (on every rank, and on main not for model_best): the
            # tag waits for the commit, and names the committed folder.
            self._tag_wanted = True
            return
        if flow.env.get_rank() == 0:
            write_last_checkpoint(self.save_dir, last_filename_basename)

    def _scheduler_iteration(self):
        scheduler = self.checkpointables.get("lr_scheduler")
        last_step = getattr(scheduler, "last_step", None)
        return last_step - 1 if isinstance(last_step, int) else None

    def _commit(self, name, iteration, tag):
        staged = os.path.join(self.save_dir, staging_name(name))
        world_size = flow.env.get_world_size()
        missing = [rank for rank in range(world_size) if not os.path.isfile(rng_state_path(staged, rank))]
        if missing:
            raise RuntimeError(f"cannot commit {staged}: no random state from ranks {missing} "
                               f"(every rank must write to the same {self.save_dir!r}, on a shared filesystem)")
        # LiBai's loader loads every entry of a checkpoint folder: this one holds an index of ours.
        flow.save({"manifest": MANIFEST, "format": "libai_ext"}, os.path.join(staged, EXTENSION_ENTRY))
        manifest = build_manifest(staged, checksums=self.checksums, iteration=iteration, world_size=world_size)
        flush_to_disk(staged)
        write_json_atomically(os.path.join(staged, MANIFEST), manifest)
        replace_folder(staged, os.path.join(self.save_dir, name))
        fsync_dir(self.save_dir)
        if tag:
            write_last_checkpoint(self.save_dir, name)
        logger.info(f"committed checkpoint {os.path.join(self.save_dir, name)} ({len(manifest['files'])} files"
                    f"{', CRC-32' if self.checksums else ''})")

    # --- loading ----------------------------------------------------------------------------

    def load(self, path, checkpointables=None):
        """LiBai's load; weights-only loads (``train.load_weight``) are verified first, and a failure
        names the checkpoint and its bad files (a resume was verified when it was chosen)."""
        if path and checkpointables is not None:
            self.verify(path)
        try:
            return super().load(path, checkpointables)
        except (CheckpointDamaged, ValueError):
            raise
        except Exception as e:
            if not path:
                raise
            problems = diagnose(path)
            raise CheckpointDamaged(path, problems or [f"loading failed on rank {flow.env.get_rank()}: "
                                                       f"{type(e).__name__}: {e}"]) from e

    def verify(self, path):
        """Raise ``CheckpointDamaged`` on every rank if ``path`` differs from its commit record."""
        problems = agree_on(0, lambda: checkpoint_problems(path, checksums=self.checksums))
        if problems:
            raise CheckpointDamaged(path, problems)


def checkpoint_problems(folder, *, checksums):
    """Why ``folder`` cannot be loaded: against its manifest if it has one, its files' own metadata if not."""
    if not os.path.isdir(folder):
        return [f"{folder} does not exist"]
    manifest = read_manifest(folder)
    if manifest is None:
        return tensor_file_problems(folder)
    return manifest_problems(folder, manifest, checksums=checksums)


def diagnose(folder):
    try:
        return checkpoint_problems(folder, checksums=False) or tensor_file_problems(folder)
    except CheckpointDamaged as e:
        return e.problems


def replace_folder(source, target):
    """Rename ``source`` to ``target``; a ``target`` already there is renamed away first, then deleted."""
    if os.path.exists(target):
        retired = target + RETIRED_SUFFIX
        if os.path.exists(retired):
            shutil.rmtree(retired)
        os.rename(target, retired)
        os.rename(source, target)
        shutil.rmtree(retired)
    else:
        os.rename(source, target)


def retire_folder(folder):
    """Delete a checkpoint folder so that no crash leaves part of it under its own name."""
    retired = folder + RETIRED_SUFFIX
    if os.path.exists(retired):
        shutil.rmtree(retired)
    os.rename(folder, retired)
    shutil.rmtree(retired)


class CommittedPeriodicCheckpointer(hooks.PeriodicCheckpointer):
    """LiBai's ``PeriodicCheckpointer`` hook (same schedule and names) whose retention keeps the
    ``max_to_keep`` newest periodic checkpoints of this run, deleting older ones only once a newer
    one is committed, never the one ``last_checkpoint`` names.  Both LiBai lines honour
    ``train.checkpointer.max_to_keep`` with it (0.1.1's own hook ignores it)."""

    def __init__(self, checkpointer, period, max_to_keep=None, file_prefix="model"):
        super().__init__(checkpointer, period, file_prefix=file_prefix)  # no LiBai retention
        if max_to_keep is not None and max_to_keep < 1:
            raise ValueError(f"train.checkpointer.max_to_keep={max_to_keep} must be at least 1")
        self.keep = max_to_keep
        self.saved = []

    def step(self, iteration, **kwargs):
        super().step(iteration, **kwargs)
        if self.keep is not None and (int(iteration) + 1) % self.period == 0:
            self.saved.append(checkpoint_name(iteration, self.file_prefix))
            self._delete_beyond_keep()

    def _delete_beyond_keep(self):
        save_dir = self.checkpointer.save_dir
        newest = os.path.join(save_dir, self.saved[-1])
        if not _is_committed(newest):
            logger.warning(f"{newest} is not committed: no older checkpoint is deleted")
            return
        pointer = read_last_checkpoint(save_dir)
        while len(self.saved) > self.keep:
            old = self.saved.pop(0)
            if flow.env.get_rank() == 0 and old != pointer and os.path.isdir(os.path.join(save_dir, old)):
                retire_folder(os.path.join(save_dir, old))


def _is_committed(folder):
    try:
        return read_manifest(folder) is not None
    except CheckpointDamaged:
        return False


def use_committed_checkpoints(trainer):
    """Give ``trainer`` a ``CommittedCheckpointer`` (before LiBai builds its hooks with it)."""
    if not isinstance(trainer.checkpointer, CommittedCheckpointer):
        checksums = try_get_key(trainer.cfg, "train.checkpointer.checksums", default=True)
        trainer.checkpointer = CommittedCheckpointer.wrapping(trainer.checkpointer, checksums=checksums)
    return trainer.checkpointer


def with_committed_retention(hook_list, cfg):
    """``hook_list`` with LiBai's ``PeriodicCheckpointer`` replaced by ``CommittedPeriodicCheckpointer``."""
    keep = try_get_key(cfg, "train.checkpointer.max_to_keep", default=None)
    return [CommittedPeriodicCheckpointer(hook.checkpointer, hook.period, max_to_keep=keep,
                                          file_prefix=hook.file_prefix)
            if type(hook) is hooks.PeriodicCheckpointer else hook for hook in hook_list]
