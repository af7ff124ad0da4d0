"""On every rank: run LiBai projects' own training scripts, one after another in this process, as
``python <script> --config-file <config> <overrides>`` would from the project's folder.

``--plan``: a JSON list of ``{"name", "folder", "script", "argv", "env", "refused"}`` (``env``: environment variables
the run's config reads, set for it and removed after; ``refused``: the name of the error the run must stop with,
recorded as kind ``refused: <its message>``).  Each run starts in its folder with the
folder first on ``sys.path`` (the projects import their ``modeling``, ``configs``, ``trainer`` packages from there)
and the modules of any other project folder forgotten.  Writes one record per run: the name and rank 0's losses per
iteration, raw (``losses.jsonl``, which ``ConsistentBatchTrainer`` writes) where the run has them, else LiBai's
``metrics.json`` (a running median: exact at iteration 0, where stock is compared).
"""
import argparse
import json
import os
import runpy
import sys

from common import run_or_die
from libai_ext.testing import write_rank_result


def forget_modules_under(folders):
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) or ""
        if name.split(".")[0] == "libai":
            continue  # a LiBai checkout's libai (an LLM project's folder, first on PYTHONPATH) serves the launch
        if any(path.startswith(folder + os.sep) for folder in folders):
            del sys.modules[name]


def losses(output_dir):
    raw = os.path.join(output_dir, "losses.jsonl")
    if os.path.exists(raw):
        with open(raw) as f:
            return "raw", [json.loads(line)["total_loss"] for line in f if line.strip()]
    with open(os.path.join(output_dir, "metrics.json")) as f:
        return "metrics.json", [r["total_loss"] for r in map(json.loads, f) if "total_loss" in r]


def run(entry, folders):
    forget_modules_under(folders)
    os.chdir(entry["folder"])
    sys.path.insert(0, entry["folder"])
    sys.argv = [entry["script"], *entry["argv"]]
    os.environ.update(entry.get("env", {}))
    try:
        runpy.run_path(entry["script"], run_name="__main__")
    except Exception as error:
        if type(error).__name__ != entry.get("refused"):
            raise
        write_rank_result(name=entry["name"], kind=f"refused: {error}", losses=[])
        return
    finally:
        sys.path.remove(entry["folder"])
        for name in entry.get("env", {}):
            del os.environ[name]
    output_dir = next(a.split("=", 1)[1] for a in entry["argv"] if a.startswith("train.output_dir="))
    kind, values = losses(output_dir) if int(os.environ.get("RANK", "0")) == 0 else (None, [])
    write_rank_result(name=entry["name"], kind=kind, losses=values)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--plan", required=True)
    args = parser.parse_args()
    with open(args.plan) as f:
        plan = json.load(f)
    folders = sorted({entry["folder"] for entry in plan})
    for entry in plan:
        run(entry, folders)


if __name__ == "__main__":
    run_or_die(main)
