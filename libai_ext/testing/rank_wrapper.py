"""Run one rank's script, log its output to ``rank<R>.log`` and its exit code to ``rank<R>.exit``.

Started by ``oneflow.distributed.launch`` (through ``multirank.launch``) as ``python rank_wrapper.py WORKDIR SCRIPT
[ARGS...]`` (``SCRIPT`` may be ``-m MODULE``).  A separate process (the standard library and ``bootstrap_wait``
only), so a rank that aborts in C++ still gets its exit code recorded.  Ranks other than 0 start their script once
rank 0's bootstrap server listens (``libai_ext.lifetime.bootstrap_wait``, docs/upstream-bugs.md §18).
"""
import os
import subprocess
import sys

from libai_ext.lifetime.bootstrap_wait import MASTER_WAIT_S, wait_for_rank0_bootstrap


def wait_for_master(env, workdir, timeout_s=MASTER_WAIT_S):
    """``wait_for_rank0_bootstrap``, which also stops waiting once rank 0's exit code is in ``workdir``."""
    wait_for_rank0_bootstrap(env, os.path.join(workdir, "rank0.exit"), timeout_s)


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
