"""Rank 0 fails once every other rank is up; the others sleep, in no collective, until something ends them.

    outlive_launcher.py READY_DIR

Without ``die_with_launcher`` nothing ends the sleepers when the launcher exits: OneFlow's
launcher stops its ranks with ``killpg`` on its own process group, which under ``timeout`` it does
not lead.  The module is imported without OneFlow: a rank that imported
OneFlow would also be ended by OneFlow's peer check, at some point, which would hide whether
anything else ends it.  ``libai_ext.lifetime`` imports nothing of OneFlow (checked below).
"""
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from libai_ext.lifetime.launcher import die_with_launcher  # noqa: E402

assert "oneflow" not in sys.modules, "libai_ext.lifetime.launcher imported OneFlow"

ready_dir = sys.argv[1]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
arranged = die_with_launcher()
print(f"rank {rank}: dies with its launcher: {arranged}", flush=True)
if rank != 0:
    open(os.path.join(ready_dir, f"rank{rank}"), "w").close()
    time.sleep(600)
deadline = time.monotonic() + 120
while len(os.listdir(ready_dir)) < world - 1 and time.monotonic() < deadline:
    time.sleep(0.05)
print("rank 0 failing on purpose", flush=True)
sys.exit(3)
