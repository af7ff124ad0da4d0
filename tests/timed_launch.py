"""Run ``oneflow.distributed.launch`` under ``timeout``, as ``make demo`` does, and time each rank's end.

Under ``timeout`` the launcher is not its process group's leader (``timeout`` is), which is how
ranks come to outlive it.  ``launch_under_timeout`` starts ``timeout <s> python -m
oneflow.distributed.launch ...`` in a session of its own, watches the process tree through
``/proc`` (Linux), and reports when the launcher ended and how long each rank lived on after
it.  Whatever still runs at the end is killed with the session.  Imports nothing from oneflow.
"""
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, Optional

from libai_ext.testing.fault_injection import with_fault_hook
from libai_ext.testing.multirank import free_port, pin_to_device


@dataclass
class Lifetimes:
    launcher_rc: Optional[int] = None
    launcher_end_s: Optional[float] = None  # since the start
    outlived_s: Dict[int, float] = field(default_factory=dict)  # rank pid -> seconds alive after the launcher
    log: str = ""

    def longest_outliving(self):
        return max(self.outlived_s.values(), default=0.0)


def _state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None, None
    return fields[0], int(fields[1])  # state, parent pid


def _alive(pid):
    state, _ = _state(pid)
    return state is not None and state != "Z"


def _children(pid):
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            state, parent = _state(int(entry))
            if parent == pid and state != "Z":
                found.append(int(entry))
    return found


def launch_under_timeout(script, nproc, args=(), *, env=None, timeout_s=300, grace_s=10.0, log_path, python=None):
    """Run ``script`` on ``nproc`` CPU ranks under ``timeout``; wait up to ``grace_s`` for every rank to
    end after the launcher; returns ``Lifetimes`` (a rank still alive then counts ``grace_s``)."""
    command = ["timeout", str(int(timeout_s)), python or sys.executable, "-m", "oneflow.distributed.launch",
               "--nproc_per_node", str(nproc), "--master_port", str(free_port()),
               *with_fault_hook([str(script)], os.environ if env is None else env), *map(str, args)]
    run_env = pin_to_device(os.environ if env is None else env, "cpu")
    run_env.setdefault("OMP_NUM_THREADS", "1")
    result = Lifetimes()
    start = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, env=run_env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        launcher, ranks = None, set()
        try:
            while time.monotonic() - start < timeout_s + grace_s:
                if launcher is None:
                    launcher = next(iter(_children(proc.pid)), None)
                if launcher is not None and result.launcher_end_s is None:
                    ranks.update(_children(launcher))
                    if not _alive(launcher):
                        result.launcher_end_s = time.monotonic() - start
                if result.launcher_end_s is not None:
                    since = time.monotonic() - start - result.launcher_end_s
                    for rank in ranks:
                        if rank not in result.outlived_s and not _alive(rank):
                            result.outlived_s[rank] = since
                    if len(result.outlived_s) == len(ranks) or since > grace_s:
                        for rank in ranks:
                            result.outlived_s.setdefault(rank, grace_s)
                        break
                time.sleep(0.05)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            for rank in ranks:
                try:
                    os.kill(rank, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            result.launcher_rc = proc.wait()
    with open(log_path, errors="replace") as f:
        result.log = f.read()
    return result
