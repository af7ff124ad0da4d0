"""Each rank ends with the ``oneflow.distributed.launch`` that started it.

When a rank fails, OneFlow 0.9.0's launcher stops the others with ``os.killpg(os.getpid(), ...)``, which misses
them when it does not lead its process group (under ``timeout``, a batch script or a supervisor): they run on,
blocked in a collective, until OneFlow's peer check ends them 1-12 s later, or never.  ``die_with_launcher()`` has
the kernel SIGKILL the rank when its parent, OneFlow's launcher, ends (``prctl(PR_SET_PDEATHSIG)``).  While a
preemption watcher is armed (``preemption_signals``) it handles that signal instead, so a rank can finish a
preemption save after the launcher's immediate exit.
"""
import ctypes
import ctypes.util
import logging
import os
import signal
import sys

from ..compat import patching

logger = logging.getLogger(__name__)
PR_SET_PDEATHSIG = 1
DISABLE_ENV = "LIBAI_EXT_DIE_WITH_LAUNCHER"
LAUNCHER_MODULE = "oneflow.distributed.launch"


def process_argv(pid):
    """The command line of process ``pid`` (Linux), or None."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace").split("\0")
    except OSError:
        return None


def is_oneflow_launcher(pid):
    """True when process ``pid`` runs ``python -m oneflow.distributed.launch`` (or its file)."""
    argv = process_argv(pid)
    if argv is None:
        return False
    launcher_file = os.path.join("oneflow", "distributed", "launch.py")
    return LAUNCHER_MODULE in argv or any(arg.endswith(launcher_file) for arg in argv)


def die_with_launcher():
    """Arrange for this process to be killed when its launcher ends; True if arranged.

    Idempotent; a no-op (False) off Linux, when the parent is not OneFlow's launcher, or with
    ``LIBAI_EXT_DIE_WITH_LAUNCHER=0``."""
    if os.environ.get(DISABLE_ENV, "1") == "0" or not sys.platform.startswith("linux"):
        return False
    parent = os.getppid()
    if not is_oneflow_launcher(parent):
        return False
    if not set_parent_death_signal(signal.SIGKILL):
        logger.warning("this rank may outlive its launcher")
        return False
    patching.process_change("die_with_launcher", "prctl(PR_SET_PDEATHSIG)", lambda: set_parent_death_signal(0))
    if os.getppid() != parent:  # the launcher ended before the request took effect
        os.kill(os.getpid(), signal.SIGKILL)
    return True


def set_parent_death_signal(sig):
    """The signal this process (its calling thread: the main thread here) gets when its parent ends.

    ``prctl(PR_SET_PDEATHSIG)`` belongs to the calling thread: call it from the one that called
    ``die_with_launcher``, the main thread.  False where it cannot be set."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        logger.warning(f"prctl(PR_SET_PDEATHSIG, {int(sig)}) failed ({os.strerror(ctypes.get_errno())})")
        return False
    return True
