"""Kill, signal or stall one rank at a chosen phase of a checkpoint save or a step (tests only; off unless asked).

``LIBAI_EXT_KILL_AT=<rank>:<phase>:<target>``, e.g. ``0:mid_weights:model_0000005``, makes rank
``<rank>`` send itself SIGKILL when the save of ``<target>`` reaches ``<phase>``:

* ``before_weights``: the save began, nothing of this checkpoint is written yet;
* ``mid_weights``: LiBai is writing the weights (after ``MID_WEIGHTS_TENSORS`` tensors);
* ``after_weights``: weights, optimizer and scheduler are written, this rank's random state is not;
* ``before_commit``: this rank's part is written, the commit has not begun;
* ``after_commit``: the checkpoint is committed and ``last_checkpoint`` names it.

Two more actions take the same value, at those phases or at two points of a training step
(``TRAINING_PHASES``; ``<target>`` is the iteration's checkpoint name, ``model_0000005``):

* ``LIBAI_EXT_SIGNAL_AT``: the rank sends SIGTERM to its process group (its launcher and every
  rank of this host), as a scheduler does;
* ``LIBAI_EXT_STALL_AT``: the rank sleeps (an hour) as a save on a slow filesystem would.

``before_agreement``: the step is done, its hooks ran, the ranks have not yet agreed whether to
stop (``libai_ext.engine.preemption``); ``mid_evaluation``: the evaluation after the step has
evaluated one batch.  A ``<target>`` of ``*`` acts at that phase of any checkpoint or step.  ``CommittedCheckpointer`` and the preemption code call ``fault_point``
at each phase; without the variables it does nothing.  The rank prints one line first, so a
test can tell the action happened where it asked.
"""
import contextlib
import itertools
import os
import signal
import sys
import time

KILL_AT_ENV = "LIBAI_EXT_KILL_AT"
SIGNAL_AT_ENV = "LIBAI_EXT_SIGNAL_AT"
STALL_AT_ENV = "LIBAI_EXT_STALL_AT"
PHASES = ("before_weights", "mid_weights", "after_weights", "before_commit", "after_commit")
TRAINING_PHASES = ("before_agreement", "mid_evaluation")
MID_WEIGHTS_TENSORS = 3
KILL_MESSAGE = "fault injection: SIGKILL"
SIGNAL_MESSAGE = "fault injection: SIGTERM to the process group from"
STALL_MESSAGE = "fault injection: stall of"
STALL_S = 3600
_ACTIONS = {KILL_AT_ENV: PHASES, SIGNAL_AT_ENV: PHASES + TRAINING_PHASES, STALL_AT_ENV: PHASES + TRAINING_PHASES}


def kill_at(rank, phase, checkpoint):
    """The value of ``LIBAI_EXT_KILL_AT`` (or of the other two) that acts on ``rank`` at ``phase`` of ``checkpoint``."""
    if phase not in PHASES + TRAINING_PHASES:
        raise ValueError(f"phase {phase!r} is not one of {PHASES + TRAINING_PHASES}")
    return f"{int(rank)}:{phase}:{checkpoint}"


def _target(env_name, environ=None):
    value = (os.environ if environ is None else environ).get(env_name)
    if not value:
        return None
    rank, phase, checkpoint = (value.split(":", 2) + ["", ""])[:3]
    if not rank.isdigit() or phase not in _ACTIONS[env_name] or not checkpoint:
        raise ValueError(f"{env_name}={value!r}: expected <rank>:<phase>:<checkpoint> with a phase in "
                         f"{_ACTIONS[env_name]}")
    return int(rank), phase, checkpoint


def _armed(env_name, phase, checkpoint):
    target = _target(env_name)
    return target is not None and target[:2] == (int(os.environ.get("RANK", "0")), phase) and \
        target[2] in (checkpoint, "*")


def _say(message):
    print(message, flush=True)
    sys.stderr.flush()


def _act(env_name, phase, checkpoint):
    rank = os.environ.get("RANK", "0")
    if env_name == KILL_AT_ENV:
        _say(f"{KILL_MESSAGE} rank {rank} at {phase} of {checkpoint}")
        os.kill(os.getpid(), signal.SIGKILL)
    elif env_name == SIGNAL_AT_ENV:
        _say(f"{SIGNAL_MESSAGE} rank {rank} at {phase} of {checkpoint}")
        os.killpg(os.getpgrp(), signal.SIGTERM)
    else:
        _say(f"{STALL_MESSAGE} rank {rank} at {phase} of {checkpoint}")
        time.sleep(STALL_S)


def fault_point(phase, checkpoint):
    """Act here if one of the variables names this rank, ``phase`` and ``checkpoint``."""
    for env_name in _ACTIONS:
        if _armed(env_name, phase, checkpoint):
            _act(env_name, phase, checkpoint)


@contextlib.contextmanager
def weights_being_written(checkpoint):
    """Around LiBai's writing of a checkpoint's entries: the ``mid_weights`` point.

    OneFlow pickles every tensor of a state dict on every rank (rank 0 also writes it), so
    counting pickled tensors finds a point inside the weights on any rank.
    """
    actions = [env_name for env_name in _ACTIONS if _armed(env_name, "mid_weights", checkpoint)]
    if not actions:
        yield
        return
    import oneflow as flow

    original = flow.Tensor.__getstate__
    pickled = itertools.count(1)

    def getstate(tensor):
        if next(pickled) == MID_WEIGHTS_TENSORS + 1:
            for env_name in actions:
                _act(env_name, "mid_weights", checkpoint)
        return original(tensor)

    flow.Tensor.__getstate__ = getstate
    try:
        yield
    finally:
        flow.Tensor.__getstate__ = original
