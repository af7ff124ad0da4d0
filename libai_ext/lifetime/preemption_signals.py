"""Preemption signals on one rank: which arrived, when, and what ends the process (standard library only).

``PreemptionWatcher`` records the first preemption signal so that training can stop after the step and commit
(``libai_ext.lifetime.preemption``), and guarantees an end (docs/checkpoints.md#with-oneflows-launcher): ``grace_s``
after the first signal at the latest (its own deadline, a kernel timer behind it); at once on a second SIGTERM or a
SIGINT during the save, except the copy of the SIGTERM that OneFlow's launcher sends its process group (one more
SIGTERM within ``ECHO_WINDOW_S``, where the launcher leads this rank's group).

Signals are read on a thread of their own from CPython's wakeup fd, so a OneFlow call that blocks the main thread
(GIL released) does not delay them.  While armed, the parent-death signal (``launcher``) is ``LAUNCHER_ENDED``, not
SIGKILL, since the launcher exits within a second of a SIGTERM: a rank that received (or has pending) a preemption
signal finishes its save; any other is killed at once, as is one signalled after a rank of this host ended (the
launcher stopping a failed job).
"""
import logging
import os
import select
import signal
import threading
import time

from ..compat import patching
from .launcher import DISABLE_ENV, is_oneflow_launcher, process_argv, set_parent_death_signal

logger = logging.getLogger(__name__)

EXIT_PREEMPTED = 143  # the checkpoint of the step reached is committed: resume with --resume
EXIT_GRACE_EXPIRED = 124  # the save did not finish within train.preemption.grace_s
EXIT_INTERRUPTED = 130  # a second signal (SIGTERM, SIGINT) ended the rank during the save
DEFAULT_SIGNALS = ("SIGTERM", "SIGUSR1")
DEFAULT_GRACE_S = 25.0
ECHO_WINDOW_S = 5.0
# How long a signal sent before the launcher's end may take to be delivered here.
SETTLE_S = 0.5
LAUNCHER_ENDED = signal.SIGRTMIN + 6
_WAKE = 0  # a byte on the wakeup pipe that is no signal: re-read the state
_ARMED = None  # the watcher armed in this process
SIGNALS_TARGET = "signal handlers (train.preemption.signals, the launcher's end), signal.set_wakeup_fd"
_RESERVED = {signal.SIGKILL: "cannot be caught", signal.SIGSTOP: "cannot be caught",
             signal.SIGALRM: "is the grace period's timer", LAUNCHER_ENDED: "is the launcher's end"}


def parse_signals(values, key="train.preemption.signals"):
    """``values`` (names such as "SIGTERM" or numbers) as a tuple of ``signal.Signals``."""
    if isinstance(values, (str, int)):
        values = [values]
    parsed = []
    for value in values:
        try:
            if isinstance(value, str):
                name = value.strip().upper()
                sig = signal.Signals[name if name.startswith("SIG") else "SIG" + name]
            else:
                sig = signal.Signals(int(value))
        except (KeyError, ValueError):
            raise ValueError(f"{key}: {value!r} is not a signal name (e.g. 'SIGTERM', 'SIGUSR1')") from None
        if sig in _RESERVED:
            raise ValueError(f"{key}: {sig.name} {_RESERVED[sig]}")
        parsed.append(sig)
    return tuple(dict.fromkeys(parsed))


def _forget_in_child():
    # A process forked by the rank (a data loader worker) inherits the handlers and the wakeup
    # fd: its signals would reach this rank's reader thread.  It gets the defaults back.
    watcher = _ARMED
    if watcher is not None:
        watcher._release_in_child()


_fork_hook_registered = False


def _register_fork_hook():
    # Python cannot unregister an at-fork hook: registered once, when a watcher first arms; with no
    # watcher armed it does nothing.
    global _fork_hook_registered
    if not _fork_hook_registered:
        os.register_at_fork(after_in_child=_forget_in_child)
        _fork_hook_registered = True
    patching.process_change("fork_hook", "os.register_at_fork(after_in_child)", lambda: None)


def _name(sig):
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _start_time(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def _children(pid):
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] not in ("Z", "X"):
                found.append((int(entry), fields[19]))
    return found


def launcher_nproc(pid):
    """``--nproc_per_node`` of the OneFlow launcher ``pid`` (its ranks on this host), or None."""
    argv = process_argv(pid)
    if argv is None:
        return None
    for index, arg in enumerate(argv):
        if arg.startswith("--nproc"):  # argparse takes any unambiguous prefix of --nproc_per_node
            value = arg.split("=", 1)[1] if "=" in arg else (argv[index + 1] if index + 1 < len(argv) else "")
            return int(value) if value.isdigit() else None
    return 1  # the launcher's default


def pending_signals():
    """Signals sent to this process and not yet delivered (``ShdPnd`` and the main thread's ``SigPnd``)."""
    pending = 0
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(("ShdPnd:", "SigPnd:")):
                    pending |= int(line.split()[1], 16)
    except OSError:
        return set()
    return {sig for sig in range(1, 65) if pending >> (sig - 1) & 1}


class PreemptionWatcher:
    """Watch one rank's preemption signals; ``arm()`` on the main thread, then read ``requested``."""

    def __init__(self, signals=DEFAULT_SIGNALS, grace_s=DEFAULT_GRACE_S, *, rank=None):
        self.signals = frozenset(parse_signals(signals))
        if not grace_s or float(grace_s) <= 0:
            raise ValueError(f"train.preemption.grace_s={grace_s!r} must be a positive number of seconds")
        self.grace_s = float(grace_s)
        self.rank = int(os.environ.get("RANK", "0")) if rank is None else rank
        self.signal_name = None  # the first preemption signal this rank received
        self.committed = None  # the checkpoint committed for this preemption
        self.iteration = None  # the training step under way (set by the training loop, for messages)
        self.step_checkpoint = None  # the checkpoint a stop at that step commits (named by the checkpointer)
        self._lock = threading.RLock()
        self._requested_at = None
        self._agreed = False
        self._deliveries = 0
        self._echo_absorbed = False
        self._interrupted = False
        self._armed = False
        self._pipe = None
        self._thread = None
        self._previous = {}
        self._previous_wakeup = -1
        self.launcher = None  # OneFlow's launcher, this rank's parent
        self._tied = False  # the launcher's end is this rank's end (die_with_launcher)
        self._echo_expected = False
        self._siblings = []
        self._nproc = None
        self._launcher_gone = False

    # --- what the training loop reads --------------------------------------------------

    @property
    def requested(self):
        """A preemption signal reached this rank."""
        return self._requested_at is not None

    @property
    def stop_agreed(self):
        return self._agreed

    @property
    def deadline(self):
        """When this rank ends at the latest (``time.monotonic()``), or None."""
        return None if self._requested_at is None else self._requested_at + self.grace_s

    def agree_stop(self):
        """Every rank agreed to stop: the grace period also binds a rank that got no signal itself."""
        with self._lock:
            self._agreed = True
            if self._requested_at is None:
                self._start_deadline(None)
        if self._armed:
            self._interrupt_ends_the_save()

    def commit(self, checkpoint):
        """The checkpoint of this preemption is committed: from now on every end is ``EXIT_PREEMPTED``."""
        with self._lock:
            self.committed = checkpoint

    def ignore_from_now_on(self):
        """The rank is ending with ``EXIT_PREEMPTED`` through OneFlow's exit (main thread): the signals watched are
        ignored from here, since late in that exit Python resets their handlers to the default action, which
        would end the rank with the signal instead (a launcher's end arriving then: exit code -40)."""
        if self._armed and threading.current_thread() is threading.main_thread():
            for sig in self._previous:
                signal.signal(sig, signal.SIG_IGN)

    # --- arming --------------------------------------------------------------------------

    def arm(self):
        """Install the handlers, the reader thread and the launcher's end signal (main thread only)."""
        global _ARMED
        if self._armed:
            return self
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("PreemptionWatcher.arm() must run on the main thread (signal handlers live there)")
        parent = os.getppid()
        if is_oneflow_launcher(parent):
            self.launcher = parent
            self._tied = os.environ.get(DISABLE_ENV, "1") != "0"
            self._echo_expected = os.getpgrp() == parent
            self._siblings = [(pid, start) for pid, start in _children(parent) if pid != os.getpid()]
            self._nproc = launcher_nproc(parent)  # a rank that ended before this one armed is not among them
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        self._pipe = (read_end, write_end)
        self._previous_wakeup = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        for sig in sorted(self.signals) + ([LAUNCHER_ENDED] if self._tied else []):
            self._previous[sig] = signal.signal(sig, self._on_signal)
        self._armed = True
        _ARMED = self
        _register_fork_hook()
        patching.process_change("preemption_signals", SIGNALS_TARGET, self.disarm)
        self._thread = threading.Thread(target=self._read_signals, name="libai_ext-preemption", daemon=True)
        self._thread.start()
        if self._tied:
            set_parent_death_signal(LAUNCHER_ENDED)
            if os.getppid() != parent:  # the launcher ended before the request took effect
                os.write(write_end, bytes([LAUNCHER_ENDED]))
        return self

    def disarm(self):
        """Undo ``arm()``, unless a preemption is under way (then the watcher stays until the process ends)."""
        global _ARMED
        with self._lock:
            if not self._armed or self.requested or self._agreed:
                return
            self._armed = False
        if self._tied:
            set_parent_death_signal(signal.SIGKILL)
        for sig, previous in self._previous.items():
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        signal.set_wakeup_fd(self._previous_wakeup)
        os.write(self._pipe[1], bytes([_WAKE]))
        self._thread.join(timeout=5)
        for fd in self._pipe:
            os.close(fd)
        _ARMED = None
        patching.released(SIGNALS_TARGET)
        if self._tied and os.getppid() != self.launcher:
            self._kill_now("its launcher ended")

    def _release_in_child(self):
        global _ARMED
        _ARMED = None
        for fd in self._pipe or ():
            os.close(fd)
        try:
            signal.set_wakeup_fd(-1)
            for sig, previous in self._previous.items():
                signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        except ValueError:  # forked from a thread that is not the main one: its writes fail on the closed fd
            pass

    def _on_signal(self, signum, frame):
        # The main thread runs this when it next executes Python: the reader thread counts the
        # deliveries; this only lets the training loop see the request without waiting for it.
        if signum in self.signals and self._requested_at is None:
            with self._lock:
                if self._requested_at is None:
                    self._start_deadline(signum)
            self._interrupt_ends_the_save()

    def _interrupt_ends_the_save(self):
        # Main thread only.  Python's own SIGINT handler raises KeyboardInterrupt wherever the main
        # thread is; during a save SIGINT ends the rank with EXIT_INTERRUPTED (the reader thread
        # does the same if it gets there first).
        if signal.SIGINT not in self.signals and signal.SIGINT not in self._previous and \
                threading.current_thread() is threading.main_thread():
            self._previous[signal.SIGINT] = signal.signal(signal.SIGINT, lambda signum, frame: self._interrupt())

    # --- the reader thread ---------------------------------------------------------------

    def _read_signals(self):
        read_end = self._pipe[0]
        while self._armed or self.requested or self._agreed:
            timeout = None if self.deadline is None else max(0.0, self._own_deadline() - time.monotonic())
            ready, _, _ = select.select([read_end], [], [], timeout)
            if not ready:
                self._expire()
                continue
            try:
                data = os.read(read_end, 512)
            except OSError:
                return
            self._handle(data)

    def _handle(self, data):
        for sig in data:
            if sig in self.signals:
                self._preemption_signal(sig)
            elif sig == signal.SIGINT:
                self._interrupt()
        if LAUNCHER_ENDED in data:
            self._launcher_ended()

    def _drain(self):
        """Handle the signals already delivered (the pipe's unread bytes)."""
        read_end = self._pipe[0]
        while select.select([read_end], [], [], 0)[0]:
            data = os.read(read_end, 512)
            if not data:
                return
            self._handle(bytes(b for b in data if b != LAUNCHER_ENDED))

    def _preemption_signal(self, sig):
        with self._lock:
            self._deliveries += 1
            if self.committed is not None:
                self._exit_now(EXIT_PREEMPTED, f"{_name(sig)} after the commit of {self.committed}")
            if self._interrupted:
                self._exit_now(EXIT_INTERRUPTED, f"{_name(sig)} after SIGINT")
            if self._deliveries == 1:
                gone = self._ended_siblings()
                if gone:
                    self._kill_now(f"{_name(sig)} after {gone} rank(s) of this host ended: the launcher is stopping "
                                   "a failed job")
                if self._requested_at is None:
                    self._start_deadline(sig)
                elif self.signal_name is None:
                    self.signal_name = _name(sig)
                logger.warning(f"rank {self.rank}: {_name(sig)} received: finishing the current step, then saving a "
                               f"checkpoint (within {self.grace_s:g} s)")
                return
            if self._echo_expected and not self._echo_absorbed and \
                    time.monotonic() - (self._requested_at or 0.0) < ECHO_WINDOW_S:
                self._echo_absorbed = True  # OneFlow's launcher sends its process group its own copy
                return
            self._exit_now(EXIT_INTERRUPTED, f"a second {_name(sig)} ended the save")

    def _interrupt(self):
        with self._lock:
            if self.committed is not None:
                self._exit_now(EXIT_PREEMPTED, f"SIGINT after the commit of {self.committed}")
            if self.requested or self._agreed:
                self._exit_now(EXIT_INTERRUPTED, "SIGINT ended the save")
            self._interrupted = True  # the main thread gets KeyboardInterrupt from Python's own handler

    def _launcher_ended(self):
        # The kernel sends the signal again as each thread of the exiting launcher ends.
        if self._launcher_gone:
            return
        self._launcher_gone = True
        self._drain()
        for attempt in range(2):
            with self._lock:
                if self.committed is not None:
                    self._exit_now(EXIT_PREEMPTED, f"the launcher ended after the commit of {self.committed}")
                if self._interrupted:
                    self._kill_now("its launcher ended after SIGINT")
                if self.requested or self._agreed or self.signals & pending_signals():
                    logger.warning(f"rank {self.rank}: its launcher ended; this rank finishes its save first "
                                   f"(within {self.grace_s:g} s of the signal)")
                    return
            if attempt == 0:
                time.sleep(SETTLE_S)  # a signal sent before the launcher's end may still be on its way
                self._drain()
        self._kill_now("its launcher ended")

    def _ended_siblings(self):
        """How many ranks of this host ended already (0 without a launcher)."""
        if self.launcher is None:
            return 0
        seen_at_arming = sum(_start_time(pid) != start for pid, start in self._siblings)
        if self._nproc is None:
            return seen_at_arming
        alive = len(_children(self.launcher))
        if os.getppid() != self.launcher:  # the launcher is gone: its children cannot be counted any more
            return seen_at_arming
        return max(seen_at_arming, self._nproc - alive)

    # --- the deadline ----------------------------------------------------------------------

    def _start_deadline(self, sig):
        self._requested_at = time.monotonic()
        self.signal_name = _name(sig) if sig is not None else None
        if signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None):
            signal.setitimer(signal.ITIMER_REAL, self.grace_s)  # ends the process even if no thread can run
        if self._pipe is not None:
            try:
                os.write(self._pipe[1], bytes([_WAKE]))  # the reader thread re-reads its deadline
            except BlockingIOError:
                pass

    def _own_deadline(self):
        return self.deadline - min(1.0, 0.1 * self.grace_s)

    def _expire(self):
        with self._lock:
            if self.committed is not None:
                self._exit_now(EXIT_PREEMPTED, f"the grace period ended after the commit of {self.committed}")
            self._exit_now(EXIT_GRACE_EXPIRED,
                           f"the grace period of {self.grace_s:g} s (train.preemption.grace_s) ran out before the "
                           "checkpoint was committed; the last committed checkpoint stays the resume point")

    # --- ends ------------------------------------------------------------------------------

    def _exit_now(self, code, why):
        logger.warning(f"rank {self.rank}: {why}: exiting with code {code}")
        logging.shutdown()
        os._exit(code)

    def _kill_now(self, why):
        logger.warning(f"rank {self.rank}: {why}: this rank ends at once")
        logging.shutdown()
        os.kill(os.getpid(), signal.SIGKILL)
