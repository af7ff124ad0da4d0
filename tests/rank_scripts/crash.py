"""A rank script for the harness's own tests: one rank fails, the others block forever."""
import os
import sys
import time

mode, bad_rank = sys.argv[1], int(sys.argv[2])
rank = int(os.environ["RANK"])
if rank == bad_rank and mode == "crash":
    print(f"rank {rank} crashing on purpose", flush=True)
    sys.exit(3)
if rank == bad_rank and mode == "abort":
    os.abort()
time.sleep(600)  # a peer waiting for a collective that never comes
