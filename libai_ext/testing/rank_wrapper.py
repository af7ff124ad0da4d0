"""Run one rank's script, log its output to ``rank<R>.log`` and its exit code to ``rank<R>.exit``.

Started by ``oneflow.distributed.launch`` (through ``multirank.launch``), once per rank,
as ``python rank_wrapper.py WORKDIR SCRIPT [ARGS...]`` (``SCRIPT`` may be ``-m`` followed by a module
name: the rank then runs ``python -u -m MODULE ARGS...``).  A separate process
(standard library only), so a rank that aborts in C++ still gets its exit code recorded.
"""
import os
import subprocess
import sys


def main(argv):
    workdir, script, args = argv[0], argv[1], argv[2:]
    rank = int(os.environ.get("RANK", "0"))
    log_path = os.path.join(workdir, f"rank{rank}.log")
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
