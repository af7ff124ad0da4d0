"""OneFlow 0.9.0: a rank that reaches rank 0's bootstrap server before it listens sleeps 10 s.

    .venv/bin/python tools/repro/bootstrap_retry_sleep.py   # ~20 s

`import oneflow` on a launched rank bootstraps the job: every rank connects to rank 0's server at
MASTER_ADDR:MASTER_PORT.  If that server is not listening yet, the rank logs "LoadServer ... Failed
at 0 times" and sleeps a hard-coded 10 s before asking again.  Ranks start a little apart on any
busy host, so most multi-rank runs lose 10 s at start-up.  Here rank 0 starts its import 1 s late,
once as launched and once with rank 1 waiting until the port accepts a connection (what
libai_ext's test harness does in `libai_ext/testing/rank_wrapper.py`); each prints rank 1's
time from its start to the end of `import oneflow`.
"""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from _common import verdict  # noqa: E402
from libai_ext.testing.multirank import free_port  # noqa: E402

RANK_SCRIPT = """
import os, sys, time
sys.path.insert(0, {root!r})
from libai_ext.testing.rank_wrapper import wait_for_master
start = time.monotonic()
rank = int(os.environ["RANK"])
if rank == 0:
    time.sleep(1.0)
elif sys.argv[1] == "gated":
    wait_for_master(os.environ, {workdir!r})
import oneflow
print(f"rank {{rank}} ready after {{time.monotonic() - start:.2f}}", flush=True)
"""


def rank1_ready_seconds(mode, workdir):
    script = os.path.join(workdir, "rank.py")
    with open(script, "w") as f:
        f.write(RANK_SCRIPT.format(root=ROOT, workdir=workdir))
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-m", "oneflow.distributed.launch", "--nproc_per_node", "2",
                          "--master_port", str(free_port()), script, mode],
                         env=env, capture_output=True, text=True, timeout=120).stdout
    line = next(line for line in out.splitlines() if line.startswith("rank 1 ready"))
    return float(line.split()[-1])


def main():
    with tempfile.TemporaryDirectory() as workdir:
        launched = rank1_ready_seconds("launched", workdir)
        gated = rank1_ready_seconds("gated", workdir)
    print(f"rank 1 ready (import oneflow done) with rank 0 1 s late: {launched:.1f} s as launched, "
          f"{gated:.1f} s when it first waits for rank 0's port", flush=True)
    verdict(launched >= 9.0 and gated < launched - 5.0, "a rank ahead of rank 0's server sleeps 10 s")


if __name__ == "__main__":
    main()
