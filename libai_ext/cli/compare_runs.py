"""``libai-ext-compare-runs`` (``tools/compare_runs.py``): compare LiBai training runs: loss and
top-1 curves in one PNG, plus a markdown table.  Reads run folders only (no OneFlow).
"""
import json
import math
import os
import sys

from .common import STOCK_MEANING, ToolParser, compare_losses, epilog, is_stock, require_pyplot

DESCRIPTION = """\
Compare LiBai training runs: their loss and top-1 curves in one PNG (--out PATH: PATH.png) and
a markdown table (PATH.md) with each run's final loss, best and final top-1 and wall time.

What is read from each run folder (LiBai's metrics.json: JSON lines from its JSONWriter):
  * "total_loss": already a running median over LiBai's logging window (JSONWriter smooths it);
  * top-1: "Acc@1" as ClsEvaluator/EvalHook put it (0..100), or "<dataset>/Acc@1" with several
    test sets (the first in sorted order);
  * "time": the median seconds per training step (TimerHook), not a clock reading.
Lines with the same "iteration" are merged, later lines winning (JSONWriter appends, so a resumed
run rewrites the iterations it repeats).

--reference NAME adds, per run, the largest relative difference of the per-iteration *raw* loss
(<run>/losses.jsonl, written by libai-ext-train) from that run's, and the first iteration above
--rtol: the layout-equivalence figure, unsmoothed.

Wall time, first found of: "wall_time_s" in <run>/run_info.json (written by libai-ext-train); a
number of seconds in <run>/wall_time.txt; else an estimate (marked "~") summing the logged step
time over the logged iterations, which leaves out start-up, evaluation and checkpointing."""

EXIT_CODES = (
    (0, "PATH.png and PATH.md written"),
    (2, "bad arguments, or a run folder without a readable metrics.json (or losses.jsonl with "
        "--reference), or matplotlib missing; nothing is written"),
)

EXAMPLES = (
    "# stock LiBai and libai_ext on configs/demo_swin_digits_cpu.py, after two libai-ext-train runs",
    "libai-ext-compare-runs --runs stock=output/swin_digits_stock plugin=output/swin_digits_plugin \\",
    "    --out output/swin_digits_pp2 --title \"Swin on digits, pp2: stock vs libai_ext\"",
    "",
    "# the demo (configs/demo_pipeline_cpu.py) on 1 rank and on pp2, raw losses against 1 rank",
    "python tools/compare_runs.py --runs one=output/demo_1 pp2=output/demo_pp2 --out output/demo_layouts \\",
    "    --reference one --rtol 1e-6",
)

LOSS_KEY = "total_loss"
ACC_KEY = "Acc@1"


class RunError(Exception):
    pass


def parse_run_arg(arg):
    name, sep, path = arg.partition("=")
    if not sep or not name.strip() or not path.strip():
        raise RunError(f"malformed --runs argument {arg!r}: expected NAME=OUTPUT_DIR")
    return name.strip(), path.strip()


def read_metrics(run_dir):
    """{iteration: merged record} from <run_dir>/metrics.json."""
    if not os.path.isdir(run_dir):
        raise RunError(f"run folder not found: {run_dir}")
    path = os.path.join(run_dir, "metrics.json")
    if not os.path.isfile(path):
        raise RunError(f"no metrics.json in run folder {run_dir} (expected {path})")
    records = {}
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                it = int(rec["iteration"])
            except (ValueError, KeyError, TypeError) as e:
                raise RunError(f"{path}:{lineno}: not a JSONWriter record ({e})") from None
            records.setdefault(it, {}).update(rec)
    if not records:
        raise RunError(f"{path} holds no records")
    return records


def acc_key(records):
    keys = {k for rec in records.values() for k in rec}
    if ACC_KEY in keys:
        return ACC_KEY
    nested = sorted(k for k in keys if k.endswith("/" + ACC_KEY))
    return nested[0] if nested else None


def series(records, key):
    pts = [(it, float(rec[key])) for it, rec in sorted(records.items()) if key in rec]
    return [p[0] for p in pts], [p[1] for p in pts]


def read_wall_time(run_dir, records):
    """(seconds or None, source label)."""
    info = os.path.join(run_dir, "run_info.json")
    txt = os.path.join(run_dir, "wall_time.txt")
    try:
        if os.path.isfile(info):
            with open(info) as f:
                value = json.load(f).get("wall_time_s")
            if value is not None:
                return float(value), "run_info.json"
        if os.path.isfile(txt):
            with open(txt) as f:
                return float(f.read().split()[0]), "wall_time.txt"
    except (ValueError, IndexError, AttributeError) as e:
        raise RunError(f"unreadable wall time in {run_dir} ({e})") from None
    # Each logged step time stands for the iterations since the previous record.
    total, prev = 0.0, -1
    for it, rec in sorted(records.items()):
        if "time" in rec:
            total += float(rec["time"]) * (it - prev)
            prev = it
    return (total, "estimate") if prev >= 0 else (None, "none")


def read_trainer(run_dir):
    """The trainer ``run_info.json`` names (written by libai-ext-train), or None."""
    try:
        with open(os.path.join(run_dir, "run_info.json")) as f:
            return json.load(f).get("trainer")
    except (OSError, ValueError, AttributeError):
        return None


def summarize(name, run_dir):
    records = read_metrics(run_dir)
    loss_it, loss = series(records, LOSS_KEY)
    key = acc_key(records)
    acc_it, acc = series(records, key) if key else ([], [])
    tail = max(1, math.ceil(0.1 * len(loss))) if loss else 0
    wall, wall_src = read_wall_time(run_dir, records)
    return {
        "name": name,
        "dir": run_dir,
        "loss_it": loss_it,
        "loss": loss,
        "acc_it": acc_it,
        "acc": acc,
        "acc_key": key,
        "final_loss": sum(loss[-tail:]) / tail if loss else None,
        "best_acc": max(acc) if acc else None,
        "final_acc": acc[-1] if acc else None,
        "wall": wall,
        "wall_src": wall_src,
        "trainer": read_trainer(run_dir),
    }


def raw_loss_difference(run, reference, rtol):
    """(largest relative raw-loss difference of ``run`` from ``reference``, first iteration above ``rtol``)."""
    from ..testing import read_raw_losses

    ours = {r["iteration"]: r["total_loss"] for r in read_raw_losses(run["dir"])}
    theirs = {r["iteration"]: r["total_loss"] for r in read_raw_losses(reference["dir"])}
    common = sorted(set(ours) & set(theirs))
    if not common:
        raise RunError(f"{run['name']} and {reference['name']} share no iteration in losses.jsonl")
    largest, first = compare_losses([theirs[it] for it in common], [ours[it] for it in common], rtol)
    return largest, None if first is None else common[first], len(common)


def fmt(value, digits):
    return "n/a" if value is None else f"{value:.{digits}f}"


def fmt_wall(s):
    if s["wall"] is None:
        return "n/a"
    mark = "~" if s["wall_src"] == "estimate" else ""
    return f"{mark}{s['wall']:.1f}"


def moving_average(values, window):
    # Trailing mean; the first points average what is available so the line starts at the data.
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def plot(plt, summaries, title, png):
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(12, 4.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    # Runs that agree draw on top of each other: dashes and marker shapes keep each one visible.
    styles = ["-", "--", ":", "-."]
    markers = ["o", "s", "^", "x"]
    for i, s in enumerate(summaries):
        c, style = colors[i % len(colors)], styles[i % len(styles)]
        if s["loss"]:
            ax_loss.plot(s["loss_it"], s["loss"], color=c, alpha=0.3, linewidth=1)
            window = max(1, len(s["loss"]) // 10)
            ax_loss.plot(s["loss_it"], moving_average(s["loss"], window), color=c, linestyle=style,
                         label=s["name"])
        if s["acc"]:
            ax_acc.plot(s["acc_it"], s["acc"], color=c, linestyle=style, marker=markers[i % len(markers)],
                        markersize=4, label=s["name"])
    ax_loss.set(title="training loss (faint: logged, solid: moving average)", xlabel="iteration",
                ylabel=LOSS_KEY)
    ax_acc.set(title="top-1 accuracy (evaluation)", xlabel="iteration", ylabel="Acc@1 (%)")
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


def write_table(summaries, title, md, png, reference=None, rtol=1e-5):
    extra = f" raw loss vs {reference['name']}: max relative difference | first iteration above {rtol:g} |" \
        if reference else ""
    lines = [
        f"# {title}",
        "",
        f"![{title}]({os.path.basename(png)})",
        "",
        "| run | final loss | best top-1 (%) | final top-1 (%) | wall time (s) |" + extra,
        "|---|---|---|---|---|" + ("---|---|" if reference else ""),
    ]
    for s in summaries:
        row = (f"| {s['name']} | {fmt(s['final_loss'], 4)} | {fmt(s['best_acc'], 2)} | "
               f"{fmt(s['final_acc'], 2)} | {fmt_wall(s)} |")
        if reference:
            largest, first, count = raw_loss_difference(s, reference, rtol)
            row += f" {largest:.3g} (over {count} iterations) | {'-' if first is None else first} |"
        lines.append(row)
    lines += [
        "",
        "final loss: mean of the logged `total_loss` over the last 10% of logged iterations "
        "(each logged value is already LiBai's running median). top-1: the evaluator's `Acc@1`.",
        "wall time: `wall_time_s` from run_info.json or wall_time.txt when the run folder has one; "
        "`~` marks an estimate from the logged per-step times (no start-up, evaluation or checkpoints).",
        "",
        "| run | folder | trainer | top-1 key | wall time source |",
        "|---|---|---|---|---|",
    ]
    for s in summaries:
        lines.append(f"| {s['name']} | `{s['dir']}` | {s['trainer'] or 'unknown'} | {s['acc_key'] or 'none'} | "
                     f"{s['wall_src']} |")
    if any(s["trainer"] and is_stock(s["trainer"]) for s in summaries):
        lines += ["", STOCK_MEANING[0].upper() + STOCK_MEANING[1:] + "."]
    with open(md, "w") as f:
        f.write("\n".join(lines) + "\n")


def build_parser():
    parser = ToolParser(description=DESCRIPTION, epilog=epilog(exit_codes=EXIT_CODES, examples=EXAMPLES))
    parser.add_argument("--runs", nargs="+", required=True, metavar="NAME=OUTPUT_DIR",
                        help="the runs to compare: a unique name and the run's train.output_dir (required)")
    parser.add_argument("--out", required=True, metavar="PATH",
                        help="output path without extension: PATH.png and PATH.md are written, folders made "
                             "(required)")
    parser.add_argument("--title", default="Run comparison", help="title of the figure and the table "
                                                                  "(default: %(default)r)")
    parser.add_argument("--reference", metavar="NAME",
                        help="compare every run's raw per-iteration losses with this run's (default: none)")
    parser.add_argument("--rtol", type=float, default=1e-5,
                        help="with --reference: the tolerance whose first crossing is reported "
                             "(default: %(default)g)")
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        runs = [parse_run_arg(a) for a in args.runs]
        names = [n for n, _ in runs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise RunError(f"run names must be unique; repeated: {', '.join(dupes)}")
        summaries = [summarize(n, d) for n, d in runs]
        reference = None
        if args.reference is not None:
            if args.reference not in names:
                raise RunError(f"--reference {args.reference!r} is not one of the --runs names {names}")
            reference = summaries[names.index(args.reference)]
            for s in summaries:  # every raw-loss file is read before anything is written
                raw_loss_difference(s, reference, args.rtol)
        plt = require_pyplot(RunError, "the plot")
    except (RunError, FileNotFoundError) as e:
        parser.error(str(e))
    out_dir = os.path.dirname(args.out)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    png, md = args.out + ".png", args.out + ".md"
    plot(plt, summaries, args.title, png)
    write_table(summaries, args.title, md, png, reference, args.rtol)
    print(f"wrote {png} and {md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
