"""Kill, signal or stall one rank at a chosen phase of a checkpoint save or a step (tests only; off unless asked).

``LIBAI_EXT_KILL_AT=<rank>:<phase>:<target>`` (e.g. ``0:mid_weights:model_0000005``) makes rank ``<rank>`` send
itself SIGKILL when the save of ``<target>`` reaches ``<phase>`` (``PHASES``: docs/checkpoints.md#kill-points).
``LIBAI_EXT_SIGNAL_AT`` (SIGTERM to the rank's process group, as a scheduler does) and ``LIBAI_EXT_STALL_AT`` (a
sleep of an hour or ``LIBAI_EXT_STALL_S`` seconds, as on a slow filesystem) take the same value, also at two points
of a step (``TRAINING_PHASES``, ``<target>`` the iteration's checkpoint name): ``before_agreement`` (its hooks ran,
the ranks have not agreed whether to stop) and ``mid_evaluation`` (one batch evaluated).  ``*`` is any target.

``libai_ext.lifetime.fault_points`` does nothing until this module is its hook (``install()``): a rank runs
``python fault_injection.py SCRIPT ARGS...``, as ``multirank.launch`` and ``tests/reaped_job.py`` start ranks when
the environment asks for an action (``with_fault_hook``).  The rank prints one line before it acts, so a test can
tell the action happened where it asked.
"""
import contextlib
import itertools
import os
import runpy
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
STALL_S_ENV = "LIBAI_EXT_STALL_S"
_ACTIONS = {KILL_AT_ENV: PHASES, SIGNAL_AT_ENV: PHASES + TRAINING_PHASES, STALL_AT_ENV: PHASES + TRAINING_PHASES}


def kill_at(rank, phase, checkpoint):
    """The value of ``LIBAI_EXT_KILL_AT`` (or of the other two) that acts on ``rank`` at ``phase`` of ``checkpoint``."""
    if phase not in PHASES + TRAINING_PHASES:
        raise ValueError(f"phase {phase!r} is not one of {PHASES + TRAINING_PHASES}")
    return f"{int(rank)}:{phase}:{checkpoint}"


def _target(env_name):
    value = os.environ.get(env_name)
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
        time.sleep(float(os.environ.get(STALL_S_ENV, STALL_S)))


def fault_point(phase, checkpoint):
    """Act here if one of the variables names this rank, ``phase`` and ``checkpoint``."""
    for env_name in _ACTIONS:
        if _armed(env_name, phase, checkpoint):
            _act(env_name, phase, checkpoint)


@contextlib.contextmanager
def weights_being_written(checkpoint):
    """Around LiBai's writing of a checkpoint's entries: the ``mid_weights`` point.

    OneFlow pickles every tensor of a state dict on every rank (rank 0 also writes it), so counting pickled tensors
    finds a point inside the weights on any rank."""
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


def install():
    """Make this module the runtime's fault hook (``libai_ext.lifetime.fault_points``)."""
    from libai_ext.lifetime import fault_points

    fault_points.install(sys.modules[__name__])


def with_fault_hook(script_words, env):
    """The words that start a rank's ``script_words`` with the hook installed, when ``env`` asks for an action."""
    if not any((env or {}).get(name) for name in _ACTIONS):
        return list(script_words)
    return [os.path.abspath(__file__.rstrip("c")), *script_words]


def _run(argv):
    install()
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    _run(sys.argv[1:])
