"""The learning rate of eager gradient accumulation, per optimizer step (docs/randomness.md).

In eager mode LiBai (0.1.1 and main) counts iterations in micro-batches: it multiplies ``train.train_iter`` and
``train.warmup_iter`` (and the milestones scaled from them) by ``train.num_accumulation_steps`` and steps the
scheduler after every micro-batch, so optimizer step ``t`` runs at position ``n * t + n - 1`` of a schedule ``n``
times longer, not at step ``t`` as graph mode and 1 rank do (1.5-4 % apart on the demo with ``n = 2``).
``ConsistentBatchTrainer`` builds the scheduler over optimizer steps (``step_scheduler``) and steps it once per
optimizer step (``OptimizerStepLRScheduler``), so its saved ``last_step`` counts optimizer steps.
"""
import copy

from libai.engine.hooks import LRScheduler
from libai.scheduler import build_lr_scheduler

_STEP_KEYS = ("max_iter", "warmup_iter")


def step_scheduler_config(scheduler_cfg, micro_batches):
    """``train.scheduler`` with its iteration counts (and milestones) in optimizer steps."""
    scaled = copy.deepcopy(scheduler_cfg)
    for key in _STEP_KEYS:
        if key in scaled and scaled[key] is not None:
            scaled[key] = int(scaled[key]) // micro_batches
    if "milestones" in scaled and scaled["milestones"] is not None:
        scaled["milestones"] = [int(m) // micro_batches for m in scaled["milestones"]]
    return scaled


def step_scheduler(cfg, optimizer, micro_batches):
    return build_lr_scheduler(step_scheduler_config(cfg.train.scheduler, micro_batches), optimizer)


class OptimizerStepLRScheduler(LRScheduler):
    """LiBai's ``LRScheduler`` hook, stepping the scheduler after an optimizer step only."""

    def __init__(self, micro_batches):
        super().__init__()
        self.micro_batches = int(micro_batches)

    def after_step(self):
        lr = self.scheduler.get_last_lr()[self._best_param_group_id]
        self.trainer.storage.put_scalar("lr", lr, smoothing_hint=False)
        if (self.trainer.iter + 1) % self.micro_batches == 0:
            self.scheduler.step()


def per_optimizer_step(hooks, micro_batches):
    """``hooks`` with LiBai's ``LRScheduler`` replaced by ``OptimizerStepLRScheduler``."""
    return [OptimizerStepLRScheduler(micro_batches) if type(hook) is LRScheduler else hook for hook in hooks]
