"""The train data position, saved and restored with checkpoints (a LiBai checkpointable; docs/data_order.md).

LiBai resumes its sampler from ``dataloader.consumed_samples``, computed with the *new* global batch, so a run resumed
with another one silently skips or repeats samples.  Registered in the trainer's checkpointer:

* ``DataPosition`` (the global-order sampler, ``train.randomness="layout_invariant"``) is saved in layout-free terms,
  so a resume with another global batch continues at the exact next sample; another dataset size, ``train.seed`` or
  shuffle, or a changed split inside an optimizer step, is refused naming the config key;
* ``GlobalBatchGuard`` (any other sampler) saves the global batch and refuses a resume under another one.
"""
import logging

from ..random.global_order import OrderPosition

logger = logging.getLogger(__name__)

KEY = "data_position"  # the checkpointable's name in the checkpointer, and its entry in a checkpoint
ORDER = "index_shuffle-feistel6"  # names the epoch order: a checkpoint of another order is refused
GLOBAL_BATCH_KEYS = "train.global_batch_size (train.train_micro_batch_size x data parallel size x " \
                    "train.num_accumulation_steps)"


class DataPosition:
    """The position of a ``GlobalOrderLoader``: the next batch the trainer will read."""

    def __init__(self, loader):
        self.loader = loader
        self.sampler = loader.sampler
        self.restored = False

    def state_dict(self):
        sampler, position = self.sampler, self.loader.delivered
        return {"kind": "global_order", "order": ORDER, "dataset_size": sampler.data_size, "seed": sampler.seed,
                "shuffle": sampler.shuffle, "epoch": position.epoch, "step_start": position.step_start,
                "batch": position.batch, "step": position.step, "consumed_samples": position.consumed_samples,
                "global_batch_size": sampler.global_batch_size, "batch_size": sampler.batch_size,
                "data_parallel_size": sampler.data_parallel_size}

    def load_state_dict(self, saved):
        if saved.get("kind") != "global_order":
            _check_global_batch(saved, self.sampler.global_batch_size, "the global-order sampler")
            logger.warning("the checkpoint was written with another train sampler (train.randomness='fast' or the "
                           "config's own): the resumed run reads the global order from dataloader.consumed_samples")
            self.restored = True
            return
        expected = self.loader.delivered  # where LiBai's consumed_samples put the loader
        position = resume_position(saved, self.sampler)
        _check_accumulation_phase(position, expected, self.sampler)
        self.loader.restart_at(position)
        self.restored = True
        if position != expected:
            logger.info(f"data position restored from the checkpoint: epoch {position.epoch}, global batch at sample "
                        f"{position.step_start} of its order, optimizer step {position.step} (global batch "
                        f"{saved['global_batch_size']} -> {self.sampler.global_batch_size}); LiBai's "
                        f"dataloader.consumed_samples={expected.consumed_samples} would have started elsewhere")

    def check_resumed(self, resumed):
        """After the trainer's ``resume_or_load``: say so when a resume found no data position."""
        if resumed and not self.restored:
            logger.warning(_NO_POSITION.format(consumed=self.loader.delivered.consumed_samples))


class GlobalBatchGuard:
    """For samplers that resume from ``consumed_samples`` alone: refuse another global batch."""

    def __init__(self, global_batch_size, sampler_name):
        self.global_batch_size = int(global_batch_size)
        self.sampler_name = sampler_name
        self.restored = False

    def state_dict(self):
        return {"kind": "global_batch", "global_batch_size": self.global_batch_size, "sampler": self.sampler_name}

    def load_state_dict(self, saved):
        _check_global_batch(saved, self.global_batch_size, self.sampler_name)
        self.restored = True

    def check_resumed(self, resumed):
        if resumed and not self.restored:
            logger.warning(_NO_POSITION.format(consumed="start_iter x train.global_batch_size"))


_NO_POSITION = ("the resumed checkpoint holds no data position (written by stock LiBai or an older libai_ext): "
                "the train loader resumes from LiBai's dataloader.consumed_samples={consumed}, which is the next "
                "sample only if " + GLOBAL_BATCH_KEYS + " is the one the checkpoint was written with")


def resume_position(saved, sampler):
    """The ``OrderPosition`` at which ``sampler`` continues a run saved as ``saved``, or a ValueError."""
    _check_same_order(saved, sampler)
    same_split = (saved["global_batch_size"], saved["data_parallel_size"], saved["batch_size"]) == (
        sampler.global_batch_size, sampler.data_parallel_size, sampler.batch_size)
    if saved["batch"] and not same_split:
        raise ValueError(
            f"the checkpoint was written after micro-batch {saved['batch']} of an optimizer step (its "
            "train.checkpointer.period is not a multiple of train.num_accumulation_steps), so the samples read so "
            "far in that step depend on its split: global batch "
            f"{saved['global_batch_size']} over {saved['data_parallel_size']} data-parallel ranks, batches of "
            f"{saved['batch_size']}; it is now {sampler.global_batch_size} over {sampler.data_parallel_size}, "
            f"batches of {sampler.batch_size}. Resume it with the same {GLOBAL_BATCH_KEYS} and data parallel size, "
            "or from a checkpoint at the end of an optimizer step")
    epoch, step_start = saved["epoch"], saved["step_start"]
    if step_start + sampler.global_batch_size > sampler.data_size:  # the epoch's rest cannot fill the new batch
        epoch, step_start = epoch + 1, 0
    return OrderPosition(epoch, step_start, saved["batch"], saved["step"], saved["consumed_samples"])


def _check_same_order(saved, sampler):
    mismatches = [
        ("order", saved.get("order"), ORDER, "the epoch order of another libai_ext version"),
        ("dataset_size", saved["dataset_size"], sampler.data_size, "the train dataset (dataloader.train.dataset) size"),
        ("seed", saved["seed"], sampler.seed, "train.seed, which keys the epoch order"),
        ("shuffle", saved["shuffle"], sampler.shuffle, "the train sampler's shuffle"),
    ]
    for _, then, now, what in mismatches:
        if then != now:
            raise ValueError(f"cannot find the next sample of the resumed checkpoint: {what} was {then!r} when it was "
                             f"written and is {now!r} now, so the data order differs; resume with the same value")


def _check_accumulation_phase(position, expected, sampler):
    # LiBai's eager trainer steps the optimizer after iterations acc-1, 2*acc-1, ... counted from 0,
    # and its graph trainers read whole optimizer steps: the trainer's phase is the one LiBai's
    # consumed_samples gives, so the restored position must be in that phase.
    if position.batch != expected.batch:
        raise ValueError(
            f"the checkpoint's data position is at micro-batch {position.batch} of an optimizer step, but LiBai "
            f"resumes this trainer at micro-batch {expected.batch} of {sampler.batches_per_step} (its iteration "
            f"count modulo train.num_accumulation_steps={sampler.num_accumulation_steps}); choose a "
            "train.num_accumulation_steps that keeps the resumed iteration at the start of an optimizer step, and "
            "a train.checkpointer.period that is a multiple of it")


def _check_global_batch(saved, global_batch_size, sampler_name):
    then = saved.get("global_batch_size")
    if then is not None and then != global_batch_size:
        raise ValueError(
            f"the resumed checkpoint was written with global batch {then}, and {GLOBAL_BATCH_KEYS} is now "
            f"{global_batch_size}: {sampler_name} resumes from dataloader.consumed_samples = start_iter x "
            "train.global_batch_size, which would skip or repeat samples. Resume with the same global batch, or "
            "use train.randomness='layout_invariant' without a sampler of the config's own (its global-order "
            "sampler continues at the exact next sample)")
