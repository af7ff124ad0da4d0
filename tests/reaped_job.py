"""A ``oneflow.distributed.launch`` job whose ranks this process reaps: exit codes and end times of each.

The ranks are the launcher's children, so their exit codes are the launcher's to read, and
OneFlow's launcher exits at once on a signal.  ``ReapedJob`` makes this process the child
subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``, Linux): a rank whose launcher ended becomes this
process's child, and its exit status is read here.  A rank that the launcher itself reaped
(the first to fail while it was alive) is reported by the launcher's own error line
("returned non-zero exit status N"), which ``exit_codes`` reads.

The launcher leads a session and process group of its own, as in a terminal or a batch job:
``signal_group`` reaches it and every rank, as a scheduler does; ``signal_ranks`` reaches the
ranks only, as ``srun`` signals its tasks.  Whatever still runs at the end is killed and reaped.
Imports nothing from oneflow.
"""
import ctypes
import ctypes.util
import os
import re
import signal
import subprocess
import sys
import time
from typing import Dict, Optional

from libai_ext.testing.fault_injection import with_fault_hook
from libai_ext.testing.multirank import free_port, pin_to_device

PR_SET_CHILD_SUBREAPER = 36
_LAUNCHER_RC = re.compile(r"returned non-zero exit status (-?\d+)")


def _set_child_subreaper(on):
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1 if on else 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def _children(pid):
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def _rank_of(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
    except OSError:
        return None
    rank = env.get(b"RANK")
    return int(rank) if rank is not None and rank.isdigit() else None


class ReapedJob:
    """``with ReapedJob(script, nproc, args, log_path=...) as job:`` start, signal, ``job.wait()``."""

    def __init__(self, script, nproc, args=(), *, log_path, env=None, timeout_s=300, python=None, under_timeout=False):
        self.nproc, self.log_path, self.timeout_s = nproc, str(log_path), timeout_s
        # under_timeout: started as `timeout <s> python -m oneflow.distributed.launch`, the launcher then leads no
        # process group (timeout does), as under `make demo` or a batch script.
        self.command = ([] if not under_timeout else ["timeout", str(int(timeout_s))]) + [
            python or sys.executable, "-m", "oneflow.distributed.launch", "--nproc_per_node", str(nproc),
            "--master_port", str(free_port()), *with_fault_hook([str(script)], os.environ if env is None else env),
            *map(str, args)]
        self.env = pin_to_device(os.environ if env is None else env, "cpu")
        self.env.setdefault("OMP_NUM_THREADS", "1")
        # `import oneflow` sets RANK=-1 in this process: the launcher's children would show it between their fork
        # and their exec, before the launcher's own RANK for each replaces it.
        for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
            self.env.pop(name, None)
        self.start = None
        self.proc = None
        self.launcher = None  # pid of oneflow.distributed.launch
        self.ranks: Dict[int, int] = {}  # rank -> pid
        self.codes: Dict[int, Optional[int]] = {}  # rank -> exit code (negative: killed by that signal)
        self.ended_s: Dict[int, float] = {}  # rank -> seconds since the start
        self.launcher_rc = None
        self.launcher_ended_s = None
        self.leftovers = []  # ranks still running when the job was cleaned up

    def __enter__(self):
        _set_child_subreaper(True)
        self.start = time.monotonic()
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.command, env=self.env, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        return self

    def __exit__(self, *exc):
        try:
            self._kill_everything()
        finally:
            _set_child_subreaper(False)
            self._log.close()
        return False

    def elapsed(self):
        return time.monotonic() - self.start

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    # --- waiting ----------------------------------------------------------------------------

    def wait_for_ranks(self, timeout_s=120):
        """Find the launcher and its ``nproc`` rank processes."""
        self.wait_until(lambda: len(self.ranks) == self.nproc, timeout_s, "the ranks to start")
        return self.ranks

    def wait_until(self, condition, timeout_s, what):
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout_s} s for {what}; log tail:\n{self.log()[-3000:]}")
            if self.proc.poll() is not None and not self.ranks and self.launcher is None:
                raise RuntimeError(f"the launcher ended before {what}; log tail:\n{self.log()[-3000:]}")
            self.poll()
            time.sleep(0.05)

    def wait(self, timeout_s=None):
        """Until the launcher and every rank ended (or ``timeout_s``); True if they all did."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        try:
            self.wait_until(self.finished, timeout_s, "every rank to end")
        except TimeoutError:
            return False
        return True

    def finished(self):
        return self.launcher_rc is not None and len(self.ranks) == self.nproc and \
            all(rank in self.ended_s for rank in self.ranks)

    def poll(self):
        """Record the launcher, the ranks, and every end since the last call."""
        now = self.elapsed()
        if self.launcher is None:
            children = _children(self.proc.pid)
            if self.command[0] != "timeout":
                self.launcher = self.proc.pid
            elif children:
                self.launcher = children[0]
        if self.launcher is not None and len(self.ranks) < self.nproc and self.launcher_ended_s is None:
            for pid in _children(self.launcher):
                rank = _rank_of(pid)
                if rank is not None and pid not in self.ranks.values():
                    self.ranks[rank] = pid
        for rank, pid in self.ranks.items():
            if rank in self.ended_s:
                continue
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # not (yet) ours: alive under the launcher, or reaped by it
                if not os.path.exists(f"/proc/{pid}"):
                    self.ended_s[rank], self.codes[rank] = now, None
                continue
            if done:
                self.ended_s[rank], self.codes[rank] = now, os.waitstatus_to_exitcode(status)
        if self.launcher_ended_s is None and self.launcher is not None and \
                (self.launcher == self.proc.pid and self.proc.poll() is not None
                 or not os.path.exists(f"/proc/{self.launcher}") or _zombie(self.launcher)):
            self.launcher_ended_s = now
        if self.launcher_rc is None and self.proc.poll() is not None:
            self.launcher_rc = self.proc.returncode
            self.launcher_ended_s = self.launcher_ended_s if self.launcher_ended_s is not None else now

    def exit_codes(self):
        """{rank: exit code}; a rank the launcher reaped gets the code its error line names."""
        codes = dict(self.codes)
        unknown = [rank for rank, code in codes.items() if code is None]
        named = _LAUNCHER_RC.findall(self.log())
        if len(unknown) == 1 and named:
            codes[unknown[0]] = int(named[-1])
        return codes

    # --- signals ------------------------------------------------------------------------------

    def signal_group(self, sig):
        """``sig`` to the launcher's process group (the launcher and every rank), as a scheduler sends it."""
        os.killpg(self.proc.pid, sig)

    def signal_launcher(self, sig):
        os.kill(self.launcher, sig)

    def signal_ranks(self, sig, ranks=None):
        """``sig`` to the rank processes only (all by default), as ``srun`` signals its tasks."""
        for rank in (self.ranks if ranks is None else ranks):
            if rank not in self.ended_s:
                try:
                    os.kill(self.ranks[rank], sig)
                except ProcessLookupError:
                    pass

    def _kill_everything(self):
        self.poll()
        self.leftovers = sorted(rank for rank in self.ranks if rank not in self.ended_s)
        for pid in [self.ranks[rank] for rank in self.leftovers]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not all(rank in self.ended_s for rank in self.ranks):
            self.poll()
            time.sleep(0.05)
        self.poll()


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False
