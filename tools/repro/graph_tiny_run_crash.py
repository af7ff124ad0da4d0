"""OneFlow 0.9.0 now and then crashes the process (SIGSEGV) while it runs a graph whose step takes microseconds.

    .venv/bin/python tools/repro/graph_tiny_run_crash.py   # seconds to ~2 min on 2 cores

The crash is on an actor thread.  Backtraces seen: `LazyJobStreamPolicy::DequeueNNGraph` in a run's finish
callback (`LaunchLazyJobInstructionPolicy::Compute` pushes the job to its actors before it queues the graph, so a
job that ends first pops an empty queue), and `Regst::GetBlobByOrdinal` in `WaitAndSendIds`.  Only a tiny graph
on a busy host runs that fast; a model's step does not.  Here: a graph of one element, run in a child process
while every core is kept busy, until the child dies or has run it `RUNS` times.
"""
import multiprocessing
import os
import signal
import subprocess
import sys

from _common import verdict

RUNS = 200_000
CHILD = """
import numpy as np, oneflow as flow
class Tiny(flow.nn.Graph):
    def build(self, x):
        return x + 1
graph, x = Tiny(), flow.ones(1)
for _ in range({runs}):
    graph(x).numpy()
print("ran", {runs}, flush=True)
"""


def busy():
    while True:
        pass


if __name__ == "__main__":
    spinners = [multiprocessing.Process(target=busy, daemon=True) for _ in range(os.cpu_count() or 2)]
    for spinner in spinners:
        spinner.start()
    try:
        child = subprocess.run([sys.executable, "-c", CHILD.format(runs=RUNS)], capture_output=True, text=True,
                               env=dict(os.environ, CUDA_VISIBLE_DEVICES=""), timeout=600)
    finally:
        for spinner in spinners:
            spinner.terminate()
    crashed = child.returncode == -signal.SIGSEGV
    print(f"child exit {child.returncode}: {(child.stdout.strip() or 'no output')[:80]}")
    verdict(crashed, "a tiny CPU graph's run crashed the process (SIGSEGV)")
