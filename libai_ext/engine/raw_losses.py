"""Reading what ``libai_ext.engine.hooks.RawLossWriter`` wrote (``<output_dir>/losses.jsonl``).

Standard library only, apart from the writer, so that tools and tests that only start jobs can read a run's
losses without importing OneFlow.
"""
import json
import os

RAW_LOSSES_FILE = "losses.jsonl"


def read_raw_losses(output_dir):
    """Every record of ``losses.jsonl`` in order: ``{"iteration": i, "total_loss": ..., ...}``."""
    with open(os.path.join(output_dir, RAW_LOSSES_FILE)) as f:
        return [json.loads(line) for line in f if line.strip()]


def raw_losses_by_run(output_dir):
    """The records split into runs: a resumed run starts where the iteration stops increasing."""
    runs, last = [[]], -1
    for record in read_raw_losses(output_dir):
        if record["iteration"] <= last:
            runs.append([])
        runs[-1].append(record)
        last = record["iteration"]
    return runs
