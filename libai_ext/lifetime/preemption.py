"""Preemption: a signal ends training after the step the ranks reach together, with a committed checkpoint.

On a signal of ``train.preemption.signals``: at the end of each optimizer step, after every other hook, every rank
sends whether it was signalled (an all-gather of one flag) and reads what all ranks sent at the previous step's end,
so all stop after the same step, whatever their clocks.  Reading the previous step's flags means no rank waits for
the others every step (a rendezvous every step cost pp2 1.5x its step time on a busy host); the stop comes one step
later.  The ranks then commit that step's checkpoint (``CommittedCheckpointer``, or the periodic one just committed)
and end with ``EXIT_PREEMPTED`` (143); an evaluation under way is cut short, unrecorded.  ``train.preemption.grace_s``
bounds it all (``preemption_signals``).  The whole sequence: docs/checkpoints.md#preemption.
"""
import contextlib
import logging

from libai.config import try_get_key
from libai.engine.hooks import HookBase

from .agreement import any_rank, flags_read, flags_sent
from .fault_points import fault_point
from .preemption_signals import DEFAULT_GRACE_S, DEFAULT_SIGNALS, EXIT_PREEMPTED, PreemptionWatcher, parse_signals

logger = logging.getLogger(__name__)
_training = None  # the watcher of the training under way in this process: evaluations agree through it


class Preempted(SystemExit):
    """Raised on every rank once the preemption's checkpoint is committed; exits with ``EXIT_PREEMPTED``.

    A ``SystemExit``: LiBai's training loop (which logs and re-raises every ``Exception``) lets it through after
    its ``after_train`` hooks, and a script that does not catch it exits with 143."""

    def __init__(self, checkpoint, iteration):
        super().__init__(EXIT_PREEMPTED)
        self.checkpoint, self.iteration = checkpoint, iteration


class EvaluationInterrupted(Exception):
    """The ranks agreed to stop during an evaluation."""


def preemption_settings(cfg):
    """``(enabled, signals, grace_s)`` from ``train.preemption``, checked (errors name the key)."""
    enabled = try_get_key(cfg, "train.preemption.enabled", default=True)
    signals = parse_signals(try_get_key(cfg, "train.preemption.signals", default=DEFAULT_SIGNALS))
    grace_s = try_get_key(cfg, "train.preemption.grace_s", default=DEFAULT_GRACE_S)
    if not isinstance(enabled, bool):
        raise ValueError(f"train.preemption.enabled={enabled!r} must be true or false")
    if isinstance(grace_s, bool) or not isinstance(grace_s, (int, float)) or grace_s <= 0:
        raise ValueError(f"train.preemption.grace_s={grace_s!r} must be a positive number of seconds")
    return enabled and bool(signals), signals, float(grace_s)


class PreemptionHook(HookBase):
    """The last hook of every step: the ranks agree whether to stop; if so, commit and raise ``Preempted``."""

    def __init__(self, watcher, checkpointer, micro_batches=1):
        self.watcher, self.checkpointer, self.micro_batches = watcher, checkpointer, int(micro_batches)
        self._flags = None  # what every rank sent at the previous step's end, not read yet

    def before_step(self):
        self.watcher.iteration = self.trainer.iter  # what an evaluation after this step belongs to
        self.watcher.step_checkpoint = self.checkpointer.name_of(self.trainer.iter)

    def after_step(self):
        iteration = self.trainer.iter
        # A stop inside an optimizer step (eager accumulation) could not be resumed exactly; the last
        # step ends training anyway (model_final).
        if (iteration + 1) % self.micro_batches or iteration >= self.trainer.max_iter - 1:
            return
        fault_point("before_agreement", self.checkpointer.name_of(iteration))
        if not self.watcher.stop_agreed and not self._signalled_before():
            return
        self.watcher.agree_stop()
        path, reused = self.checkpointer.save_iteration(iteration)
        self.watcher.commit(path)
        why = self.watcher.signal_name or "a signal to another rank"
        logger.warning(f"preempted ({why}): every rank stopped after iteration {iteration}; checkpoint {path} is "
                       f"committed{' (the periodic save of this iteration)' if reused else ''}; exiting with code "
                       f"{EXIT_PREEMPTED}: continue with --resume")
        self.watcher.ignore_from_now_on()
        raise Preempted(path, iteration)

    def _signalled_before(self):
        """Whether a rank was signalled at the previous step's end; sends this step's flag."""
        previous, self._flags = self._flags, flags_sent(self.watcher.requested)
        return previous is not None and flags_read(previous)


class InterruptibleLoader:
    """An evaluation loader whose ranks agree, before each batch, whether to stop (``EvaluationInterrupted``)."""

    def __init__(self, loader, watcher):
        self.loader, self.watcher = loader, watcher

    def __len__(self):
        return len(self.loader)

    def __getattr__(self, name):
        return getattr(self.loader, name)

    def __iter__(self):
        batches = iter(self.loader)
        while True:
            if self.watcher.stop_agreed or any_rank(self.watcher.requested):
                self.watcher.agree_stop()
                raise EvaluationInterrupted()
            try:
                batch = next(batches)
            except StopIteration:
                return
            yield batch
            fault_point("mid_evaluation", self.watcher.step_checkpoint)


def evaluate_interruptibly(evaluate, test_loaders, model):
    """``evaluate(test_loaders)``, cut short (None) once the ranks agree to stop for a preemption."""
    watcher = _training
    if watcher is None:
        return evaluate(test_loaders)
    module = getattr(model, "model", model)  # an nn.Graph evaluates its module
    training = module.training
    try:
        return evaluate([InterruptibleLoader(loader, watcher) for loader in test_loaders])
    except EvaluationInterrupted:
        module.train(training)  # LiBai's inference_context does not restore the mode on an exception
        logger.warning(f"evaluation at iteration {watcher.iteration} interrupted by a preemption: its results are "
                       "not recorded")
        return None


@contextlib.contextmanager
def preemptible(trainer):
    """Around ``trainer.train()``: preemption armed (``arm_preemption``), and disarmed at the end of a
    training no signal interrupted (a preemption under way keeps it until the process ends)."""
    global _training
    watcher = _training = arm_preemption(trainer)
    try:
        yield watcher
    finally:
        if watcher is not None and not (watcher.requested or watcher.stop_agreed):
            _training = None
            watcher.disarm()


def arm_preemption(trainer):
    """Arm a ``PreemptionWatcher`` and register a ``PreemptionHook`` as ``trainer``'s last hook.

    Returns the watcher (None when ``train.preemption.enabled`` is false).  Every rank registers the hook and
    evaluates through the watcher, so every rank joins their collectives even where it could not be armed."""
    enabled, signals, grace_s = preemption_settings(trainer.cfg)
    if not enabled:
        return None
    watcher = PreemptionWatcher(signals, grace_s)
    try:
        watcher.arm()
    except RuntimeError as e:
        logger.warning(f"train.preemption: {e}; this rank does not react to {', '.join(s.name for s in signals)}")
    micro_batches = 1 if try_get_key(trainer.cfg, "graph.enabled", default=False) else \
        int(try_get_key(trainer.cfg, "train.num_accumulation_steps", default=1) or 1)
    trainer.register_hooks([PreemptionHook(watcher, trainer.checkpointer, micro_batches)])
    return watcher
