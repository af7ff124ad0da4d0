"""LiBai main's projects as shipped, with the plugin and stock: how far each layout's losses are from 1 rank.

    .venv-libai-main/bin/python benchmarks/project_agreement.py [--iters 10] [--out benchmarks/results/project_agreement.md]

Runs what ``tests/test_libai_projects.py`` runs (its harness, ``tests/libai_projects.py``): MoCo v3, MAE, SimCSE and
Llama's SFT from the projects archive at the pinned commit, by their own scripts (SimCSE: LiBai's ``tools/train_net.py``) with
the adoption's lines, CPU-sized (a ViT of depth 2 and width 32 on the digits at 32 x 32; SimCSE: a BERT of depth 2
and width 64 on real English sentences; global batch 8; Llama: a 2-layer Llama of width 64 from a HuggingFace-format
checkpoint on Alpaca-format samples, global batch 16, 8 micro-batches a step, eager; graph runs one, compared with an
eager 1-rank run of one; its rows compare every micro-batch's loss), one launch per layout (1 rank, dp2, tp2,
dp2 x tp2, pp2, and dp2 x pp2 for Llama),
stock's scripts (as shipped, with what they need to start on CPU ranks) on 1 rank and dp2.  Prints, for each run, the
relative difference of its loss from the reference at iteration 0 and the largest over the iterations:

* plugin runs against the project's eager run on 1 rank (LiBai's raw loss per step, ``losses.jsonl``);
* stock on dp2 against stock on 1 rank (LiBai's ``metrics.json``: a running median, exact at iteration 0).
"""
import argparse
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests"), os.path.join(ROOT, "benchmarks")]

from report import publish  # noqa: E402


def relative(losses, reference):
    return [abs(x - y) / abs(y) for x, y in zip(losses, reference)]


def llama_rows(harness, found):
    """Llama's runs, every micro-batch's loss (eager: 8 a step) against its 1-rank reference (``LLAMA_REFERENCES``)."""
    rows = []
    for layout, name in harness.llama_compared_runs():
        gaps = relative(found[layout][name][1], found["1"][harness.LLAMA_REFERENCES[name]][1])
        graph, accumulation = harness.LLAMA_RUNS[name]
        mode = f"{'graph' if graph else 'eager'}, {accumulation} micro-batch{'es' if accumulation > 1 else ''} a step"
        rows.append(f"| Llama, libai_ext, {mode} | {layout} | {gaps[0]:.2e} | {max(gaps):.2e} | {len(gaps)} |")
    one, dp2 = found["1"]["stock-Llama"][1], found["dp2"]["stock-Llama"][1]
    gaps = relative(dp2, one)
    rows.append(f"| Llama, stock | dp2 | {gaps[0]:.2e} | {max(gaps):.2e} | {len(gaps)} |")
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--out", default=None, help="also write the table here")
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()

    import test_libai_projects as harness
    from conftest import records_of_every_rank
    from libai_ext.data.text_data import ensure_text_data
    from libai_projects import adopt, extract_projects, project_data

    harness.ITERS = args.iters
    work = args.workdir or tempfile.mkdtemp(prefix="project_agreement_")
    projects = extract_projects(os.path.join(work, "projects"))
    for project in projects:
        adopt(projects[project], project)
    data = project_data(work, ensure_text_data(os.path.join(work, "text")))
    found = {}
    for name, layout in harness.LAYOUTS.items():
        stock = list(harness.SCRIPTS) if name in harness.STOCK_LAYOUTS else []
        result, plan = harness.run_layout(projects, work, data, name, layout, stock, harness.plugin_runs(name),
                                          llama=harness.llama_runs(name))
        records = records_of_every_rank(result, count=len(plan))[0]
        found[name] = {r["name"]: (r["kind"], r["losses"]) for r in records}

    def per_step(run, project):
        kind, losses = run
        return harness.per_step(kind, losses, project)

    rows = ["| run | layout | iteration 0 | largest over the iterations | iterations |", "|---|---|---|---|---|"]
    for project in harness.SCRIPTS:
        if project == "Llama":
            rows += llama_rows(harness, found)
            continue
        reference = per_step(found["1"][f"{project}-graph{None if project == 'MOCOV3' else False}"], project)
        for layout in harness.LAYOUTS:
            for run_project, graph in harness.plugin_runs(layout):
                if run_project != project or (layout == "1" and not graph):
                    continue
                losses = per_step(found[layout][f"{project}-graph{graph}"], project)
                gaps = relative(losses, reference)
                mode = "graph" if graph else "eager"
                rows.append(f"| {project}, libai_ext, {mode} | {layout} | {gaps[0]:.2e} | {max(gaps):.2e} | "
                            f"{len(gaps)} |")
        one, dp2 = found["1"][f"stock-{project}"][1], found["dp2"][f"stock-{project}"][1]
        gaps = relative(dp2, one)
        rows.append(f"| {project}, stock | dp2 | {gaps[0]:.2e} | {max(gaps):.2e} | {len(gaps)} |")
    text = ("Relative difference of the loss from 1 rank (plugin runs: from the project's eager run on 1 rank; "
            "stock: from stock on 1 rank).\n\n" + "\n".join(rows) + "\n")
    publish(text, args.out, title="LiBai main's projects on every layout, with the plugin and stock")


if __name__ == "__main__":
    main()
