"""Write docs/benchmarks.md from the results files in benchmarks/results/.

    .venv/bin/python benchmarks/make_benchmarks_page.py           # rewrites docs/benchmarks.md (tracked, on purpose)
    .venv/bin/python benchmarks/make_benchmarks_page.py --check   # exit 1 if docs/benchmarks.md is out of date

Every results file starts with its metadata (``benchmarks/report.py`` writes it):

    # <title>

    Command: `<the command that wrote the file>`       (one line per command)
    Host: <the machine and its load>

and the rest of the file is the measurement. The page gives each file a section under its group (``GROUPS``; a file
no group names goes under "Other measurements"): its command, its host's load and its tables with their headings. A
results file's notes (its prose) stay in the file, which the section links: the page holds the numbers, once. The
page leaves out when a figure was measured (a date on the host line) and the machine every host line names (the
page's introduction states it). Pure Python: no OneFlow, no LiBai.
"""
import argparse
import os
import re
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join("benchmarks", "results")
PAGE = os.path.join("docs", "benchmarks.md")
THIS = "benchmarks/make_benchmarks_page.py"
WIDTH = 118

# (heading, what the reader needs to read the group's tables, results files by name without ".md")
GROUPS = [
    ("The whole training step",
     "Four trainers take turns, run by run (`benchmarks/trainer_overhead.py`): *stock* (LiBai's `DefaultTrainer`), "
     "*consistent* (`ConsistentBatchTrainer` under `\"fast\"`, every rank loading), *consistent+stage0-only* (called "
     "*fast* in the ratio columns) and *layout_invariant* (the default). Step time is rank 0's median after warm-up, "
     "median over repeats. *load* is `next(loader)` on stage 0, *get_batch* the rest of LiBai's data time; *data_time* "
     "on other stages includes waiting for stage 0. The demo is `configs/demo_pipeline_cpu.py`; GPT-2 is "
     "`configs/libai_gpt2_cpu.py` with its fusions off for all four (stock has no CPU kernel for them).",
     ["trainer_overhead", "trainer_overhead_gpt2", "trainer_overhead_gpt2_8ranks",
      "trainer_overhead_gpt2_8ranks_5repeats", "trainer_overhead_gpt2_8ranks_10repeats",
      "trainer_overhead_gpt2_8ranks_10repeats_stock", "step_profile_gpt2_8ranks", "libai_zoo_step_time"]),
    ("Dropout masks and graph steps",
     "The layout-invariant mask against OneFlow's `flow._C.dropout` in one process (`benchmarks/mask_cost.py`): "
     "*int ops* is the path taken where the keyed-dropout op is not built, *host loop* the C loop of eager CPU "
     "ranks; *peak* is a call's growth of the peak resident set, *held* what its output and saved mask keep. In a "
     "train graph (`--graph`), *keyed op* is what graphs run. The graph steps "
     "(`benchmarks/trainer_overhead.py --graph`) run LiBai's models in graph mode under both trainers. On a GPU, "
     "`make gpu-check` measures the op, the int-op path and the GPT-2 graph step.",
     ["mask_cost", "mask_cost_graph", "trainer_overhead_gpt2_graph", "trainer_overhead_vit_graph",
      "trainer_overhead_demo_graph"]),
    ("The layout-invariant pieces",
     "Each piece of `train.randomness=\"layout_invariant\"` against the path it replaces, side by side in one run.",
     ["randomness_cost", "generator_bijection", "param_init_cost", "loader_keying", "augmentation_check", "mixup_cost",
      "epoch_order"]),
    ("Random ops inside a forward",
     "Every random op of OneFlow routed to the keyed streams: per call against OneFlow's own op "
     "(`benchmarks/random_op_routing.py`), and a whole step against a checkout without the routing "
     "(`benchmarks/trainer_overhead.py --baseline`), taking turns run by run.",
     ["random_op_routing", "trainer_overhead_random_ops_demo", "trainer_overhead_random_ops_gpt2"]),
    ("Equivalence",
     "Per-iteration losses of one config on several layouts or modes, against one reference run.",
     ["layout_equivalence", "zoo_equivalence", "graph_parity", "graph_libai_equivalence"]),
    ("Checkpoints", "Committed checkpoints against LiBai's own save and load, and the step with preemption's "
     "agreement on and off.", ["checkpoint_cost", "preemption_cost"]),
]
OTHER = "Other measurements"

# The figures other pages quote (the README's cost line), computed here from the tables of the results files:
# (what, results files, the "trainer" a row must have, the column read). A quote gives the whole range of the
# rows, never one of them; tests/test_docs.py checks that the README's ratios are these.
SUMMARY_TITLE = "The figures the README quotes"
SUMMARY = [
    ("LiBai's GPT-2, a whole eager step on 8 CPU ranks at (dp, tp, pp) = (2, 2, 2), `layout_invariant` over stock",
     ["trainer_overhead_gpt2_8ranks", "trainer_overhead_gpt2_8ranks_5repeats",
      "trainer_overhead_gpt2_8ranks_10repeats_stock"], "layout_invariant", "step / stock"),
    ("A graph-mode step of GPT-2, ViT and the demo on 1 CPU rank and on pp2 (a 2-stage pipeline), "
     "`layout_invariant` over stock",
     ["trainer_overhead_gpt2_graph", "trainer_overhead_vit_graph", "trainer_overhead_demo_graph"],
     "layout_invariant", "step / stock"),
]

INTRO = """\
# Measurements

<!-- Generated by {this} from the files in benchmarks/results/.
     Do not edit this page: edit those files (or the script), then run `.venv/bin/python {this}`. -->

Every figure measured by a script of `benchmarks/`: each section is one results file of `benchmarks/results/`, with
the command that wrote it and its host's load; the file keeps its notes. The scripts run the variants they compare
side by side, interleaved, and report ratios: compare the ratios, not the times. What they mean:
[performance.md](performance.md).

**The machine.** Every figure comes from a machine with 2 CPU cores and no GPU, mostly shared with other jobs; runs
with more than 2 ranks oversubscribe the cores.

**Measuring again.** A command that names its results file rewrites that tracked file; give `--out` (`OUT=` for the
shell scripts) a path under `output/` to leave it alone. Then `.venv/bin/python {this}` rewrites this page, which
`tests/test_docs.py` checks.

Training runs' figures live with their explanation: [experiment.md](experiment.md),
[layout_invariance.md](layout_invariance.md), [zoo_equivalence.md](zoo_equivalence.md) and the test suite's times
([testing.md](testing.md#times)).
"""

DATE = re.compile(r"[;,]?\s*\b\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2})?)?(?:\s*UTC)?")
HEADING = re.compile(r"^(#{1,6})(\s)", re.M)
FENCE = re.compile(r"^(```|~~~)")


class ResultsFileError(ValueError):
    """A results file without the metadata the page needs; the message names the file and the field."""


def parse(path):
    """``{"name", "title", "commands", "host", "body"}`` of one results file."""
    name = os.path.splitext(os.path.basename(path))[0]
    with open(path, encoding="utf-8") as f:
        lines = f.read().rstrip("\n").split("\n")
    where = os.path.join(RESULTS, os.path.basename(path))
    if not lines or not lines[0].startswith("# "):
        raise ResultsFileError(f"{where}: its first line must be '# <title>' (benchmarks/report.py writes it)")
    commands, host, i = [], None, 1
    while i < len(lines) and (not lines[i].strip() or lines[i].startswith(("Command: ", "Host: "))):
        if lines[i].startswith("Command: "):
            commands.append(lines[i][len("Command: "):].strip().strip("`"))
        elif lines[i].startswith("Host: "):
            host = DATE.sub("", lines[i][len("Host: "):]).strip().rstrip(";,")
        i += 1
    if not commands:
        raise ResultsFileError(f"{where}: no 'Command: `...`' line after its title")
    if not host:
        raise ResultsFileError(f"{where}: no 'Host: ...' line after its title (the machine and its load)")
    return {"name": name, "title": lines[0][2:].strip(), "commands": commands, "host": host,
            "body": "\n".join(lines[i:])}


def demoted(body, levels):
    """``body`` with its headings ``levels`` deeper (outside code blocks), and a blank line before a table that
    follows a line of text (markdown starts no table inside a paragraph)."""
    out, in_code, previous = [], False, ""
    for line in body.split("\n"):
        if FENCE.match(line):
            in_code = not in_code
        elif not in_code:
            line = HEADING.sub(lambda m: "#" * min(6, len(m.group(1)) + levels) + m.group(2), line)
            if line.startswith("|") and previous.strip() and not previous.startswith("|"):
                out.append("")
        out.append(line)
        previous = line
    return "\n".join(out).strip("\n")


MACHINE = re.compile(r"^vm, 2 CPU cores[,;:]?\s*")  # the machine the introduction names


def section(result):
    name = result["name"]
    commands = "\n".join(result["commands"])
    load = MACHINE.sub("", result["host"])
    host = f"Host: {load[0].upper() + load[1:]}. " if load else ""
    return (f"### {result['title']}\n\n```\n{commands}\n```\n\n"
            + textwrap.fill(f"{host}Notes: [{RESULTS}/{name}.md](../{RESULTS}/{name}.md).", WIDTH,
                            break_on_hyphens=False, break_long_words=False) + "\n\n"
            f"{demoted(numbers_of(result['body']), 2)}\n")


def numbers_of(body):
    """``body``'s headings, tables and code blocks; its prose (the notes) stays in the results file."""
    out, in_code = [], False
    for line in body.split("\n"):
        if FENCE.match(line):
            in_code = not in_code
            out.append(line)
        elif in_code or line.startswith(("|", "#")):
            out.append(line)
        elif not line.strip() and out and out[-1].strip():
            out.append("")
    return "\n".join(out)


def table_rows(body):
    """``[{header: cell}]`` of every row of every markdown table in ``body``."""
    rows, header = [], None
    for line in body.split("\n"):
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif not all(set(c) <= set("-: ") for c in cells):
            rows.append(dict(zip(header, cells)))
    return rows


def summary_range(results, files, trainer, column):
    """``(low, high, rows)`` of ``column`` over the rows of ``trainer`` in ``files``; names a file that lacks them."""
    values = []
    for name in files:
        if name not in results:
            raise ResultsFileError(f"{os.path.join(RESULTS, name)}.md: missing (the page's summary reads it)")
        found = [float(row[column]) for row in table_rows(results[name]["body"])
                 if row.get("trainer") == trainer and re.fullmatch(r"[\d.]+", row.get(column, ""))]
        if not found:
            raise ResultsFileError(f"{os.path.join(RESULTS, name)}.md: no row of trainer {trainer!r} with a "
                                   f"{column!r} value (the page's summary reads it)")
        values += found
    return min(values), max(values), len(values)


def summary(results):
    lines = [f"## {SUMMARY_TITLE}", "",
             textwrap.fill("Computed by this page's script from the tables below: the lowest and highest ratio of "
                           "every row of the comparison, over every run. Quote the range, not one run.", WIDTH), "",
             "| comparison | range | rows | files |", "|---|---|---|---|"]
    for what, files, trainer, column in SUMMARY:
        if not any(name in results for name in files):
            continue  # a results folder without this comparison (a partial copy)
        low, high, count = summary_range(results, files, trainer, column)
        links = ", ".join(f"[{n}](#{slug(results[n]['title'])})" for n in files)
        lines.append(f"| {what} | {low:.3f}-{high:.3f}x | {count} | {links} |")
    return "\n".join(lines) + "\n" if len(lines) > 5 else ""


def slug(heading):
    """GitHub's id of a heading (as tests/test_docs.py computes it)."""
    text = heading.replace("`", "").replace("*", "").strip().lower()
    return "".join(c for c in text if c.isalnum() or c in " -_").replace(" ", "-")


def render(root=ROOT):
    """The text of docs/benchmarks.md from the results files under ``root``."""
    folder = os.path.join(root, RESULTS)
    results = {r["name"]: r for r in (parse(os.path.join(folder, f)) for f in sorted(os.listdir(folder))
                                      if f.endswith(".md"))}
    grouped = [(title, intro, [results[n] for n in names if n in results]) for title, intro, names in GROUPS]
    named = {n for _, _, names in GROUPS for n in names}
    others = [r for n, r in results.items() if n not in named]
    if others:
        grouped.append((OTHER, "Results files that no group of the page's script names yet.", others))
    grouped = [(title, intro, files) for title, intro, files in grouped if files]
    contents = "\n".join(f"- [{title}](#{slug(title)})" for title, _, files in grouped)
    quoted = summary(results)
    if quoted:
        contents = f"- [{SUMMARY_TITLE}](#{slug(SUMMARY_TITLE)})\n" + contents
    parts = [INTRO.format(this=THIS), contents + "\n"] + ([quoted] if quoted else [])
    for title, intro, files in grouped:
        parts.append(f"## {title}\n\n{textwrap.fill(intro, WIDTH, break_on_hyphens=False)}\n")
        parts += [section(r) for r in files]
    return "\n".join(parts)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="exit codes: 0 written (or up to date), 1 out of date (--check), "
                                            "2 a results file without its metadata")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the page is out of date")
    args = parser.parse_args(argv)
    try:
        text = render()
    except ResultsFileError as e:
        print(f"make_benchmarks_page: {e}", file=sys.stderr)
        return 2
    page = os.path.join(ROOT, PAGE)
    if args.check:
        with open(page, encoding="utf-8") as f:
            current = f.read()
        if current != text:
            print(f"{PAGE} is out of date: run .venv/bin/python {THIS}", file=sys.stderr)
            return 1
        return 0
    with open(page, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {PAGE} from {len([f for f in os.listdir(os.path.join(ROOT, RESULTS)) if f.endswith('.md')])} "
          f"results files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
