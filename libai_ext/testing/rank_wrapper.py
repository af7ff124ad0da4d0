"""Run one rank's script, log its output to ``rank<R>.log`` and its exit code to ``rank<R>.exit``.

Started by ``oneflow.distributed.launch`` (through ``multirank.launch``), once per rank,
as ``python rank_wrapper.py WORKDIR SCRIPT [ARGS...]`` (``SCRIPT`` may be ``-m`` followed by a module
name: the rank then runs ``python -u -m MODULE ARGS...``).  A separate process
(standard library only), so a rank that aborts in C++ still gets its exit code recorded.

Ranks other than 0 start their script only once rank 0's bootstrap server accepts connections
(``wait_for_master``): OneFlow 0.9.0 bootstraps inside ``import oneflow``, and a rank that asks
before rank 0 listens sleeps a hard-coded 10 s before asking again (docs/upstream-bugs.md).
"""
import os
import socket
import subprocess
import sys
import time

# Never longer than OneFlow's own retry would have slept: a script that never starts OneFlow on rank 0
# loses at most these seconds.
MASTER_WAIT_S = 10.0


def wait_for_master(env, workdir, timeout_s=MASTER_WAIT_S, interval_s=0.05):
    """Return once ``MASTER_ADDR:MASTER_PORT`` accepts a connection, rank 0 has ended, or ``timeout_s``
    passed (at once on rank 0 or without a master port)."""
    if int(env.get("RANK", "0")) == 0 or "MASTER_PORT" not in env:
        return
    address = (env.get("MASTER_ADDR", "127.0.0.1"), int(env["MASTER_PORT"]))
    rank0_exit = os.path.join(workdir, "rank0.exit")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not os.path.exists(rank0_exit):
        try:
            with socket.create_connection(address, timeout=1.0):
                return
        except OSError:
            time.sleep(interval_s)


def main(argv):
    workdir, script, args = argv[0], argv[1], argv[2:]
    rank = int(os.environ.get("RANK", "0"))
    log_path = os.path.join(workdir, f"rank{rank}.log")
    wait_for_master(os.environ, workdir)
    with open(log_path, "w") as log:
        code = subprocess.call([sys.executable, "-u", script, *args], stdout=log,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    tmp = os.path.join(workdir, f"rank{rank}.exit.tmp")
    with open(tmp, "w") as f:
        f.write(str(code))
    os.replace(tmp, os.path.join(workdir, f"rank{rank}.exit"))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
