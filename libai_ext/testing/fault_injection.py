"""Kill -9 one rank at a chosen phase of a checkpoint save (tests only; off unless asked).

``LIBAI_EXT_KILL_AT=<rank>:<phase>:<checkpoint>``, e.g. ``0:mid_weights:model_0000005``, makes
rank ``<rank>`` send itself SIGKILL when the save of ``<checkpoint>`` reaches ``<phase>``:

* ``before_weights``: the save began, nothing of this checkpoint is written yet;
* ``mid_weights``: LiBai is writing the weights (after ``MID_WEIGHTS_TENSORS`` tensors);
* ``after_weights``: weights, optimizer and scheduler are written, this rank's random state is not;
* ``before_commit``: this rank's part is written, the commit has not begun;
* ``after_commit``: the checkpoint is committed and ``last_checkpoint`` names it.

``CommittedCheckpointer`` calls ``fault_point`` at each phase; without the variable it does
nothing.  The rank prints one line first, so a test can tell the kill happened where it asked.
"""
import contextlib
import itertools
import os
import signal
import sys

KILL_AT_ENV = "LIBAI_EXT_KILL_AT"
PHASES = ("before_weights", "mid_weights", "after_weights", "before_commit", "after_commit")
MID_WEIGHTS_TENSORS = 3
KILL_MESSAGE = "fault injection: SIGKILL"


def kill_at(rank, phase, checkpoint):
    """The value of ``LIBAI_EXT_KILL_AT`` that kills ``rank`` at ``phase`` of ``checkpoint``'s save."""
    if phase not in PHASES:
        raise ValueError(f"phase {phase!r} is not one of {PHASES}")
    return f"{int(rank)}:{phase}:{checkpoint}"


def _target(environ=None):
    value = (os.environ if environ is None else environ).get(KILL_AT_ENV)
    if not value:
        return None
    rank, phase, checkpoint = (value.split(":", 2) + ["", ""])[:3]
    if not rank.isdigit() or phase not in PHASES or not checkpoint:
        raise ValueError(f"{KILL_AT_ENV}={value!r}: expected <rank>:<phase>:<checkpoint> with a phase in {PHASES}")
    return int(rank), phase, checkpoint


def _armed(phase, checkpoint):
    target = _target()
    return target is not None and target == (int(os.environ.get("RANK", "0")), phase, checkpoint)


def _kill(phase, checkpoint):
    print(f"{KILL_MESSAGE} rank {os.environ.get('RANK', '0')} at {phase} of {checkpoint}", flush=True)
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def fault_point(phase, checkpoint):
    """Die here if ``LIBAI_EXT_KILL_AT`` names this rank, ``phase`` and ``checkpoint``."""
    if _armed(phase, checkpoint):
        _kill(phase, checkpoint)


@contextlib.contextmanager
def weights_being_written(checkpoint):
    """Around LiBai's writing of a checkpoint's entries: the ``mid_weights`` kill point.

    OneFlow pickles every tensor of a state dict on every rank (rank 0 also writes it), so
    counting pickled tensors finds a point inside the weights on any rank.
    """
    if not _armed("mid_weights", checkpoint):
        yield
        return
    import oneflow as flow

    original = flow.Tensor.__getstate__
    pickled = itertools.count(1)

    def getstate(tensor):
        if next(pickled) > MID_WEIGHTS_TENSORS:
            _kill("mid_weights", checkpoint)
        return original(tensor)

    flow.Tensor.__getstate__ = getstate
    try:
        yield
    finally:
        flow.Tensor.__getstate__ = original
