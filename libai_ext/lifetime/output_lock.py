"""One live run per output folder: a second run into a folder that a live run owns is refused.

Two runs writing one ``train.output_dir`` (a job requeued while its first attempt still saves, a command started
twice) overwrite each other's checkpoints, ``last_checkpoint`` and logs.  Rank 0 alone (every run has one) holds an
exclusive ``flock`` on ``<output_dir>/libai_ext.lock`` for its lifetime, with its host, process id, start time and
command in the file; the kernel releases it however the process ends, so nothing needs cleaning up.  The other
ranks act on rank 0's verdict (``agree_on``): every rank of a refused run stops with the same error.  Shared and
lock-less filesystems: docs/checkpoints.md#one-live-run-per-output-folder.
"""
import errno
import fcntl
import json
import logging
import os
import socket
import sys
import time

logger = logging.getLogger(__name__)
LOCK_FILE = "libai_ext.lock"
_held = {}  # output folder (real path) -> open lock file of this process


class OutputDirInUse(RuntimeError):
    """Another live run holds the output folder."""


def _owner_text(path):
    try:
        with open(path) as f:
            owner = json.load(f)
        return (f"host {owner.get('host')}, process {owner.get('pid')} (started {owner.get('started')}: "
                f"{owner.get('command')})")
    except (OSError, ValueError, AttributeError):
        return "an unknown process (its lock file names none)"


def lock_output_dir(output_dir):
    """Take ``output_dir``'s lock for this process (idempotent); raise ``OutputDirInUse`` naming the owner.

    Returns the lock file's path, or None where the filesystem offers no locks (a warning says so).
    """
    os.makedirs(output_dir, exist_ok=True)
    key = os.path.realpath(output_dir)
    path = os.path.join(output_dir, LOCK_FILE)
    if key in _held:
        return path
    handle = open(path, "a+")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        handle.close()
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise OutputDirInUse(f"train.output_dir={output_dir!r} belongs to a live run: {_owner_text(path)} holds "
                                 f"{path}. Stop that run, or give this one another train.output_dir") from None
        logger.warning(f"train.output_dir={output_dir!r}: cannot lock {path} ({os.strerror(e.errno)}): two runs "
                       "into this folder would not be told apart")
        return None
    handle.seek(0)
    handle.truncate()
    json.dump({"host": socket.gethostname(), "pid": os.getpid(),
               "started": time.strftime("%Y-%m-%d %H:%M:%S %z"), "command": " ".join(sys.argv)}, handle)
    handle.flush()
    _held[key] = handle  # open for the life of the process: the lock lasts as long
    return path


def claim_output_dir(cfg):
    """On every rank: rank 0 locks ``train.output_dir``, and a refusal stops every rank with its error."""
    from .agreement import agree_on

    output_dir = cfg.train.output_dir
    agree_on(0, lambda: lock_output_dir(output_dir))
