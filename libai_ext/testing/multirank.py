"""Launch an N-rank job with ``oneflow.distributed.launch`` and never hang.

Every rank runs behind ``rank_wrapper``, which logs its output to ``rank<R>.log`` and its exit code to
``rank<R>.exit``.  The harness polls those files and, on the first non-zero exit or at the timeout, kills the whole
process group (launcher and every rank) and reports the rank, its command and its log's tail.  Ranks report results
with ``write_rank_result`` (JSON lines in ``rank<R>.jsonl``).  Ranks run on CPU, on a GPU host too, unless
``device="cuda"`` or ``LIBAI_EXT_TEST_DEVICE=cuda`` (``pin_to_device``).  Imports nothing from oneflow.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from .fault_injection import with_fault_hook

RESULTS_DIR_ENV = "LIBAI_EXT_RESULTS_DIR"
TEST_DEVICE_ENV = "LIBAI_EXT_TEST_DEVICE"
TEST_DEVICES = ("cpu", "cuda")
# Run as a script, not with -m: importing the package would load oneflow into every wrapper too.
_RANK_WRAPPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rank_wrapper.py")
_TAIL_CHARS = 4000


class MultiRankError(RuntimeError):
    """A rank failed, or the job ran past its timeout.  ``result`` holds the logs."""

    def __init__(self, message, result):
        super().__init__(message)
        self.result = result


@dataclass
class LaunchResult:
    command: List[str]
    nproc: int
    workdir: str
    returncodes: Dict[int, Optional[int]] = field(default_factory=dict)
    timed_out: bool = False
    wall_s: float = 0.0
    _parsed: Dict[int, tuple] = field(default_factory=dict, repr=False, compare=False)

    def log(self, rank):
        return _read(os.path.join(self.workdir, f"rank{rank}.log"))

    def records(self, rank):
        """The JSON records rank ``rank`` wrote with ``write_rank_result`` (parsed once while the file stays as it is:
        tests read one case at a time from thousands of records)."""
        path = os.path.join(self.workdir, f"rank{rank}.jsonl")
        try:
            stat = os.stat(path)
            version = (stat.st_size, stat.st_mtime_ns)
        except OSError:
            version = None
        cached = self._parsed.get(rank)
        if version is None or cached is None or cached[0] != version:
            text = _read(path)
            cached = self._parsed[rank] = (version, [json.loads(line) for line in text.splitlines() if line.strip()])
        return list(cached[1])

    def record(self, rank, key=None):
        """The last record of ``rank`` (or its value under ``key``)."""
        recs = self.records(rank)
        if not recs:
            raise AssertionError(f"rank {rank} wrote no result; log tail:\n{self.log(rank)[-_TAIL_CHARS:]}")
        return recs[-1] if key is None else recs[-1][key]

    def ranks_logging(self, text):
        """The ranks whose own output contains ``text`` (e.g. an error each rank raised itself).

        Proof that every rank reached an error on its own: once one rank exits non-zero, OneFlow's launcher
        terminates the others, often before their exit code is recorded."""
        return [rank for rank in range(self.nproc) if text in self.log(rank)]

    def ended_with(self, code):
        """Whether the job ended as exit code ``code`` says, as OneFlow's launcher lets one end.

        ``0``: every rank exited 0.  Non-zero: a rank exited with ``code``, and every other one did too or was still
        running when the launcher terminated it (no exit code)."""
        codes = [self.returncodes.get(rank) for rank in range(self.nproc)]
        if code == 0:
            return codes == [0] * self.nproc
        return code in codes and all(rc in (code, None) for rc in codes)

    def failed_ranks(self):
        return sorted(r for r, rc in self.returncodes.items() if rc not in (0, None))

    def running_ranks(self):
        return sorted(r for r, rc in self.returncodes.items() if rc is None)


def write_rank_result(**values):
    """Called inside a rank: append one JSON line to this rank's result file."""
    results_dir = os.environ.get(RESULTS_DIR_ENV)
    if not results_dir:
        return
    rank = int(os.environ.get("RANK", "0"))
    with open(os.path.join(results_dir, f"rank{rank}.jsonl"), "a") as f:
        f.write(json.dumps(values) + "\n")


def ranks_device(environ=None):
    """The device the test ranks run on: ``$LIBAI_EXT_TEST_DEVICE``, ``"cpu"`` by default."""
    device = (os.environ if environ is None else environ).get(TEST_DEVICE_ENV) or "cpu"
    if device not in TEST_DEVICES:
        raise ValueError(f"{TEST_DEVICE_ENV}={device!r} is not one of {TEST_DEVICES}")
    return device


def pin_to_device(environ, device):
    """``environ`` for processes that run on ``device``: on ``"cpu"`` no GPU is visible to them.

    OneFlow's ``cuda.device_count()`` is then 0, so OneFlow and LiBai take their CPU paths even on a GPU host."""
    if device not in TEST_DEVICES:
        raise ValueError(f"device={device!r} is not one of {TEST_DEVICES}")
    environ = dict(environ)
    if device == "cpu":
        environ["CUDA_VISIBLE_DEVICES"] = ""
    return environ


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _poll_exits(workdir, nproc):
    codes = {}
    for rank in range(nproc):
        text = _read(os.path.join(workdir, f"rank{rank}.exit")).strip()
        codes[rank] = int(text) if text else None
    return codes


def launch(script, nproc, args=(), timeout=300, env=None, workdir=None, check=True, stop_on_failure=True,
           device=None, progress=None):
    """Run ``script`` on ``nproc`` ranks (CPU ranks unless ``device="cuda"``); return a ``LaunchResult``.

    ``script`` is a file, or ``("-m", "package.module")``.  ``progress()`` is called at every poll (a few times a
    second).  With ``check``, raise ``MultiRankError`` naming the failed rank, or the ranks still running at the
    timeout; with ``check=False`` the caller inspects ``returncodes`` / ``timed_out``.  ``stop_on_failure=False``
    kills the job only at the timeout, so a test can see whether every rank exits by itself after one fails.
    ``device`` defaults to ``ranks_device()``.
    """
    workdir = workdir or tempfile.mkdtemp(prefix="multirank-")
    os.makedirs(workdir, exist_ok=True)
    run_env = pin_to_device(os.environ if env is None else env, device or ranks_device())
    command = [
        sys.executable, "-m", "oneflow.distributed.launch",
        "--nproc_per_node", str(nproc), "--master_port", str(free_port()),
        _RANK_WRAPPER, workdir, *with_fault_hook(_script_words(script), run_env), *map(str, args),
    ]
    run_env[RESULTS_DIR_ENV] = workdir
    # Oversubscribed CPU ranks crawl when each also spawns a thread per core.
    run_env.setdefault("OMP_NUM_THREADS", "1")
    result = LaunchResult(command=command, nproc=nproc, workdir=workdir)
    with open(os.path.join(workdir, "launcher.log"), "w") as launcher_log:
        proc = subprocess.Popen(command, env=run_env, stdout=launcher_log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        launcher_rc = supervise(result, [proc], timeout, stop_on_failure, progress)[0]
    if launcher_rc is not None and launcher_rc != 0 and not result.failed_ranks():
        # The launcher itself failed (e.g. before any rank started): blame every silent rank.
        result.returncodes = {r: (rc if rc is not None else launcher_rc) for r, rc in result.returncodes.items()}
    if check:
        _raise_on_failure(result)
    return result


def _script_words(script):
    """The words after the rank wrapper's workdir: ``[path]`` or ``["-m", module]``."""
    if isinstance(script, (list, tuple)):
        if len(script) != 2 or script[0] != "-m":
            raise ValueError(f"script={script!r}: expected a path or ('-m', 'package.module')")
        return [str(word) for word in script]
    return [str(script)]


def supervise(result, launchers, timeout, stop_on_failure=True, progress=None):
    """Watch the ranks' exit files until every rank exited, one failed (``stop_on_failure``), every launcher (one
    per host) ended, or ``timeout`` passed; then kill every launcher's process group.  Fills ``result.returncodes``,
    ``timed_out`` and ``wall_s``; returns the launchers' exit codes (None for one still running)."""
    start = time.monotonic()
    try:
        while True:
            result.returncodes = _poll_exits(result.workdir, result.nproc)
            launcher_rcs = [proc.poll() for proc in launchers]
            if (stop_on_failure and result.failed_ranks()) or not result.running_ranks():
                break
            if all(rc is not None for rc in launcher_rcs):
                time.sleep(0.5)  # the launchers ended: give the last exit files a moment
                result.returncodes = _poll_exits(result.workdir, result.nproc)
                break
            if time.monotonic() - start > timeout:
                result.timed_out = True
                break
            if progress is not None:
                progress()
            time.sleep(0.2)
    finally:
        for proc in launchers:
            kill_group(proc)
        result.wall_s = time.monotonic() - start
    return launcher_rcs


def _raise_on_failure(result):
    cmd = " ".join(result.command)
    if result.timed_out:
        running = result.running_ranks()
        raise MultiRankError(
            f"timed out after {result.wall_s:.0f}s: {cmd}\nranks still running: {running}\n"
            + _tails(result, running), result)
    failed = result.failed_ranks()
    if failed:
        first = failed[0]
        raise MultiRankError(
            f"rank {first} failed with exit code {result.returncodes[first]} "
            f"(failed ranks: {failed}): {cmd}\n" + _tails(result, [first]), result)


def _tails(result, ranks):
    parts = []
    for rank in ranks[:4]:
        parts.append(f"--- rank {rank} log tail ---\n{result.log(rank)[-_TAIL_CHARS:]}")
    launcher = _read(os.path.join(result.workdir, "launcher.log"))
    if launcher.strip():
        parts.append(f"--- launcher log tail ---\n{launcher[-_TAIL_CHARS:]}")
    return "\n".join(parts)
