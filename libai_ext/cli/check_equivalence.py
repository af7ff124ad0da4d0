"""``libai-ext-check-equivalence`` (``tools/check_equivalence.py``): does the parallel layout change the training?

Each layout trains under ``libai_ext.testing.launch`` (hard timeout) with ``libai-ext-train``'s code plus a
``ModuleRecorder``; its ranks run this module (``--as-rank RUNS.json``) however the tool was started.  Several
``--config-file`` train in turn in one launch per layout: OneFlow's start-up is most of a short run.
"""
import json
import os
import re
import sys
import tempfile
import time

from .common import (
    STOCK_MEANING, ToolParser, compare_losses, epilog, is_stock, module_target, rank_environ, relative_differences,
    require_files, require_pyplot,
)

MODULE = "libai_ext.cli.check_equivalence"
RANK_FLAG = "--as-rank"
AXES = ("dp", "tp", "pp", "acc")
GRAPH_SUFFIX = ":graph"
EXIT_MATCH, EXIT_DIFFER, EXIT_USAGE, EXIT_RUN_FAILED = 0, 1, 2, 3
PROGRESS_PERIOD_S = 5.0  # between progress lines when the output is not a terminal

DESCRIPTION = """\
Does the parallel layout change the training?  Trains a config for --iters iterations on each
layout, from the same seed and with the same global batch, then compares every layout's raw
per-iteration loss with the first layout's.  For a layout that differs by more than --rtol it
names the first iteration above it and, in the first layout's forward order, the first batch
field or module output that differs (with the size of the difference) or, if the forward pass
agrees, the first gradient that differed one iteration before.  While it runs it prints which
layout it is on and that run's iteration ("[2/4] layout dp2xpp2 on 4 ranks: iteration 3/5").

layouts:
  A layout is "1" (one rank) or one to four of dp<N>, tp<N>, pp<N>, acc<N> (N >= 1) joined by
  "x", each axis at most once, in any order: dp = data parallel, tp = tensor parallel, pp =
  pipeline stages, acc = gradient accumulation steps; it runs on dp * tp * pp ranks.  A suffix
  ":graph" trains it in graph mode (graph.enabled=True; its modules are not recorded).  Examples:
  1, pp2, tp2, dp2, dp2xpp2 (4 ranks), tp2xpp2, dp2xtp2xpp2 (8 ranks), acc2, dp2xacc2:graph.
  The first layout is the reference.  Each layout sets train.dist.data_parallel_size /
  tensor_parallel_size / pipeline_parallel_size and train.num_accumulation_steps, keeps the
  global batch (train.train_micro_batch_size = global batch / (dp * acc)), trains --iters
  optimizer steps with evaluation and checkpoints off and logs every iteration; an eager layout
  with accumulation logs each micro-batch, and a step's loss is their mean.  Modules are compared
  between eager layouts of one accumulation, micro-batch by micro-batch; otherwise losses only.
  pp<N> needs a model with at least N pipeline layers (train.dist.pipeline_num_layers; LiBai
  0.1.1 also wants it divisible by N).  Ranks run on CPU (GPUs hidden) unless
  LIBAI_EXT_TEST_DEVICE=cuda; several ranks on a few cores are slow but exact.
  key=value overrides apply to every layout (e.g. train.trainer=libai.engine.DefaultTrainer)."""

EXIT_CODES = (
    (EXIT_MATCH, "every layout matches the first within --rtol"),
    (EXIT_DIFFER, "a layout differs (the table names where)"),
    (EXIT_USAGE, "bad arguments: a malformed layout, a missing config, matplotlib missing for --plot"),
    (EXIT_RUN_FAILED, "a layout's run failed or passed --timeout (the failed rank's log tail is printed)"),
)

EXAMPLES = (
    "# the demo's 2-stage pipeline and dp2 x pp2 against 1 rank, 5 iterations",
    "libai-ext-check-equivalence --config-file configs/demo_pipeline_cpu.py --layouts 1 pp2 dp2xpp2",
    "",
    "# stock LiBai on the same layouts (it differs), with the loss curves in a PNG",
    "libai-ext-check-equivalence --config-file configs/demo_pipeline_cpu.py --layouts 1 pp2 dp2xpp2 \\",
    "    --plot output/stock_layouts.png train.trainer=libai.engine.DefaultTrainer",
    "",
    "# the Swin digits config with dropout, every layout up to 8 ranks, 50 iterations (from a checkout)",
    "python tools/check_equivalence.py --config-file configs/demo_swin_digits_cpu.py \\",
    "    --layouts 1 pp2 tp2 tp2xpp2 dp2 dp2xpp2 dp2xtp2xpp2 --iters 50 --rtol 1e-4 --timeout 1800 \\",
    "    model.drop_rate=0.1 model.drop_path_rate=0.2",
)


class UsageError(ValueError):
    pass


# --- layouts ------------------------------------------------------------------------------------

def parse_layout(text):
    """``"dp2xpp2"`` -> ``{"dp": 2, "tp": 1, "pp": 2, "acc": 1, "graph": False}``; ``"1"`` -> one rank;
    ``"dp2xacc2:graph"`` -> two ranks, accumulation 2, graph mode."""
    sizes = dict.fromkeys(AXES, 1)
    sizes["graph"] = text.endswith(GRAPH_SUFFIX)
    body = text[:-len(GRAPH_SUFFIX)] if sizes["graph"] else text
    if body == "1":
        return sizes
    seen = set()
    for part in body.split("x"):
        match = re.fullmatch(r"(dp|tp|pp|acc)([1-9][0-9]*)", part)
        if not match or match.group(1) in seen:
            raise UsageError(f"--layouts: {text!r} is not '1' or dp<N>/tp<N>/pp<N>/acc<N> joined by 'x', with an "
                             "optional ':graph' (e.g. dp2xpp2, acc2:graph)")
        seen.add(match.group(1))
        sizes[match.group(1)] = int(match.group(2))
    return sizes


def world_size(sizes):
    return sizes["dp"] * sizes["tp"] * sizes["pp"]


def configured(config_file, opts):
    """The config as given, with the command line's overrides."""
    from libai.config import LazyConfig

    return LazyConfig.apply_overrides(LazyConfig.load(config_file), opts)


def configured_global_batch(cfg, config_file):
    """The global batch of the config as given (micro batch x dp x accumulation)."""
    from libai.config import try_get_key

    micro = try_get_key(cfg, "train.train_micro_batch_size", default=None)
    if micro is None:
        raise UsageError(f"{config_file}: train.train_micro_batch_size is not set")
    dp = try_get_key(cfg, "train.dist.data_parallel_size", default=1) or 1
    acc = try_get_key(cfg, "train.num_accumulation_steps", default=None) or 1
    return int(micro) * int(dp) * int(acc)


def layout_overrides(sizes, global_batch, iters, output_dir):
    dp, acc = sizes["dp"], sizes["acc"]
    if global_batch % (dp * acc):
        raise UsageError(f"global batch {global_batch} is not divisible by dp x acc = {dp * acc}")
    return [f"train.dist.data_parallel_size={sizes['dp']}", f"train.dist.tensor_parallel_size={sizes['tp']}",
            f"train.dist.pipeline_parallel_size={sizes['pp']}",
            f"train.train_micro_batch_size={global_batch // (dp * acc)}", f"train.num_accumulation_steps={acc}",
            f"graph.enabled={bool(sizes['graph'])}",
            f"train.train_iter={iters}", f"train.output_dir={output_dir}", "train.evaluation.enabled=False",
            "train.log_period=1", "train.checkpointer.period=1000000"]


def config_name(config_file):
    return os.path.splitext(os.path.basename(config_file))[0]


# --- running ------------------------------------------------------------------------------------

class RunProgress:
    """Reports a layout run as ``losses.jsonl`` grows: ``[2/4] layout dp2xpp2 on 4 ranks: iteration 3/5``.

    On a terminal one line is rewritten in place; otherwise a line is printed when the iteration
    changes, at most every ``PROGRESS_PERIOD_S`` seconds (and always for the last one).
    """

    def __init__(self, position, total, name, ranks, outputs, iters, stream=None):
        """``outputs``: the run folders of this launch (one per config); ``iters``: their total."""
        self.prefix = f"[{position}/{total}] layout {name} on {ranks} rank{'s' if ranks > 1 else ''}"
        self.paths = [os.path.join(output, "losses.jsonl") for output in outputs]
        self.iters, self.stream = iters, stream or sys.stdout
        self.in_place = self.stream.isatty()
        self.start = self.last_print = time.monotonic()
        self.done = -1

    def _write(self, text):
        if self.in_place:
            self.stream.write("\r" + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def begin(self):
        self._write(f"{self.prefix}: starting ...")

    def __call__(self):
        done = sum(_count_lines(path) for path in self.paths)
        now = time.monotonic()
        if done != self.done and (self.in_place or done >= self.iters or now - self.last_print >= PROGRESS_PERIOD_S):
            self.done, self.last_print = done, now
            self._write(f"{self.prefix}: iteration {done}/{self.iters}")

    def end(self, ok):
        self()
        verdict = "done" if ok else "FAILED"
        self._write(f"{self.prefix}: {verdict} in {time.monotonic() - self.start:.0f} s")
        if self.in_place:
            self.stream.write("\n")


def _count_lines(path):
    try:
        with open(path) as f:
            return sum(1 for line in f if line.strip())
    except FileNotFoundError:
        return 0


def run_layout(args, name, sizes, global_batches, position, total):
    """Train every config on one layout (one launch); returns ``{config file: output dir}``."""
    from ..testing import MultiRankError, launch

    outputs = {config: os.path.join(args.workdir, name, config_name(config)) for config in args.config_file}
    runs = [{"config_file": config, "script": args.script,
             "opts": [*args.opts, *layout_overrides(sizes, global_batches[config], args.iters, outputs[config])]}
            for config in args.config_file]
    os.makedirs(os.path.join(args.workdir, name), exist_ok=True)
    runs_file = os.path.join(args.workdir, name, "runs.json")
    with open(runs_file, "w") as f:
        json.dump(runs, f, indent=1)
    argv = [RANK_FLAG, runs_file]
    steps = args.iters * (1 if sizes["graph"] else sizes["acc"])  # eager accumulation logs each micro-batch
    progress = RunProgress(position, total, name, world_size(sizes), list(outputs.values()),
                           steps * len(outputs))
    progress.begin()
    try:
        launch(module_target(MODULE), world_size(sizes), argv, timeout=args.timeout, env=rank_environ(),
               workdir=os.path.join(args.workdir, f"{name}-logs"), progress=progress)
    except MultiRankError:
        progress.end(ok=False)
        raise
    progress.end(ok=True)
    return outputs


def read_losses(output, iters, micro_batches=1):
    """Per-step raw total loss written by ``RawLossWriter``: with eager accumulation the mean of the
    step's ``micro_batches`` records (each the loss of one micro-batch)."""
    from ..testing import read_raw_losses

    losses = {record["iteration"]: record["total_loss"] for record in read_raw_losses(output)}
    missing = [i for i in range(iters * micro_batches) if i not in losses]
    if missing:
        raise RuntimeError(f"{output}: no loss recorded for iterations {missing}")
    return [sum(losses[step * micro_batches + m] for m in range(micro_batches)) / micro_batches
            for step in range(iters)]


# --- comparing ----------------------------------------------------------------------------------

def first_difference(reference, other, rtol, kinds=("batch", ":out")):
    """The first record (reference order) of the given kinds whose fingerprint differs."""
    from ..engine.module_recorder import difference

    others = {r["name"]: r for r in other}
    for record in reference:
        if not any(k in record["name"] if k.startswith(":") else record["name"].startswith(k) for k in kinds):
            continue
        if record["name"] not in others:
            return record["name"], "missing in this layout", None
        relative, absolute = difference(record, others[record["name"]])
        if not relative <= rtol:
            return record["name"], relative, absolute
    return None


def locate(reference_dir, output, step, rtol, micro_batches=1):
    """A sentence naming where the run at ``output`` first departs from the reference in optimizer step ``step``
    (with eager accumulation, its ``micro_batches`` iterations in order; an iteration is then one micro-batch)."""
    from ..engine.module_recorder import read_records

    ref, other = read_records(reference_dir), read_records(output)
    for iteration in range(step * micro_batches, (step + 1) * micro_batches):
        if iteration not in ref or iteration not in other:
            return f"no module records for iteration {iteration}"
        found = first_difference(ref[iteration], other[iteration], rtol)
        if found:
            return describe(found, f"iteration {iteration}, forward")
    iteration = step * micro_batches - 1  # the previous step's last micro-batch
    if iteration >= 0 and iteration in ref and iteration in other:
        found = first_difference(ref[iteration], other[iteration], rtol, kinds=(":grad",))
        if found:
            return describe(found, f"iteration {iteration}, backward")
    return "every recorded batch field, output and gradient agrees"


def describe(found, where):
    name, relative, absolute = found
    if absolute is None:
        return f"{where}: {name} {relative}"
    return f"{where}: {name} differs (relative {relative:.3g}, max abs {absolute:.3g})"


# --- plotting -----------------------------------------------------------------------------------

def plot_losses(losses, reference, path, rtol, title=""):
    """One PNG: every layout's raw loss per iteration overlaid (top), and each layout's relative
    difference from ``reference`` per iteration with ``rtol`` marked (bottom, symmetric log scale:
    an exact match sits on 0)."""
    plt = require_pyplot(UsageError, "--plot")
    fig, (ax_loss, ax_diff) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles, markers = ["-", "--", ":", "-."], ["o", "s", "^", "x", "v", "D", "P", "*"]
    smallest = largest = rtol
    for i, (name, values) in enumerate(losses.items()):
        # Layouts that agree draw on top of each other: colour, dashes and markers keep each visible.
        style = dict(color=colors[i % len(colors)], linestyle=styles[i % len(styles)],
                     marker=markers[i % len(markers)], markersize=3)
        iterations = range(len(values))
        ax_loss.plot(iterations, values, label=name, **style)
        if name != reference:
            diffs = relative_differences(losses[reference], values)
            ax_diff.plot(iterations, diffs, label=name, **style)
            smallest = min([smallest, *(d for d in diffs if d > 0)])
            largest = max([largest, *diffs])
    ax_diff.axhline(rtol, color="grey", linewidth=1, linestyle="--", label=f"rtol {rtol:g}")
    ax_diff.set_yscale("symlog", linthresh=smallest / 10)
    ax_diff.set_ylim(0, largest * 10)
    ax_diff.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    ax_loss.set(title=title or "raw training loss per iteration", ylabel="total loss")
    ax_diff.set(title=f"relative difference from {reference}", xlabel="iteration", ylabel="|loss - ref| / |ref|")
    for ax in (ax_loss, ax_diff):
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.tight_layout()
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --- the tool -----------------------------------------------------------------------------------

def check(args):
    from ..testing import MultiRankError

    layouts = {name: parse_layout(name) for name in args.layouts}
    if len(layouts) < 2:
        raise UsageError("--layouts needs at least two different layouts (the first is the reference)")
    if args.plot:
        require_pyplot(UsageError, "--plot")  # before the runs, not after them
    configs = {config: configured(config, args.opts) for config in args.config_file}
    global_batches = {config: args.global_batch or configured_global_batch(cfg, config)
                      for config, cfg in configs.items()}
    stock = {config: is_stock(cfg.train.get("trainer") or "") for config, cfg in configs.items()}
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="check-equivalence-")
    outputs = {}
    for position, (name, sizes) in enumerate(layouts.items(), 1):
        try:
            outputs[name] = run_layout(args, name, sizes, global_batches, position, len(layouts))
        except MultiRankError as e:
            print(f"error: layout {name}: {e}", file=sys.stderr)
            return EXIT_RUN_FAILED
    all_match = True
    for config in args.config_file:
        all_match &= report(args, config, layouts, {name: out[config] for name, out in outputs.items()},
                            global_batches[config], stock[config])
    print("\nall layouts match" if all_match else "\nlayouts differ")
    return EXIT_MATCH if all_match else EXIT_DIFFER


def modules_comparable(reference, other):
    """Both runs recorded their modules eagerly on micro-batches that pair one for one: no graph, the same
    accumulation (libai_ext's micro-batch m of a step holds the same samples on every layout)."""
    return not reference["graph"] and not other["graph"] and reference["acc"] == other["acc"]


def micro_batches_logged(sizes):
    return 1 if sizes["graph"] else sizes["acc"]


def report(args, config, layouts, outputs, global_batch, stock=False):
    """Print one config's table (and plot); True when every layout matches the first."""
    losses = {name: read_losses(outputs[name], args.iters, micro_batches_logged(sizes))
              for name, sizes in layouts.items()}
    reference = args.layouts[0]
    print(f"\n{config_name(config)}: per-iteration raw loss vs {reference} ({args.iters} iterations, global batch "
          f"{global_batch}, rtol {args.rtol:g}); runs in {args.workdir}")
    if stock:
        print(f"({STOCK_MEANING})")
    print("| layout | ranks | max relative difference | first diverging iteration | first difference |")
    print("|---|---|---|---|---|")
    all_match = True
    for name in args.layouts[1:]:
        worst, first = compare_losses(losses[reference], losses[name], args.rtol)
        if first is None:
            where = "-"
        elif modules_comparable(layouts[reference], layouts[name]):
            where = locate(outputs[reference], outputs[name], first, args.rtol, micro_batches_logged(layouts[name]))
        else:  # micro-batches against whole batches, or a graph: no module records to compare
            where = "losses only (different accumulation or graph mode: modules are not compared)"
        all_match &= first is None
        print(f"| {name} | {world_size(layouts[name])} | {worst:.3g} | {'-' if first is None else first} | {where} |")
    if args.plot:
        path = args.plot if len(args.config_file) == 1 else plot_path(args.plot, config)
        plot_losses(losses, reference, path, args.rtol,
                    title=f"{os.path.basename(config)}: raw loss per iteration, {len(layouts)} layouts")
        print(f"wrote {path}")
    return all_match


def plot_path(plot, config):
    stem, extension = os.path.splitext(plot)
    return f"{stem}_{config_name(config)}{extension or '.png'}"


def rank_main(argv):
    """One rank: ``libai-ext-train``'s run plus a ModuleRecorder, for each config of ``RUNS.json`` in turn."""
    from .train_net import parse_args as train_net_args

    with open(argv[0]) as f:
        runs = json.load(f)
    for run in runs:
        if run.get("script"):
            run_script(run)
        else:
            run_config(train_net_args(["--config-file", run["config_file"], *run["opts"]]))
    return 0


def run_script(run):
    """A project's own training script, as ``python <script> --config-file <config> <overrides>`` run from its
    folder, with every trainer it trains recording its losses and modules."""
    import runpy

    from ..engine import launch as train_net
    from ..engine.module_recorder import record_every_trainer

    def main():
        record_every_trainer()
        sys.path.insert(0, os.path.dirname(run["script"]))
        sys.argv = [run["script"], "--config-file", run["config_file"], *run["opts"]]
        try:
            runpy.run_path(run["script"], run_name="__main__")
        except SystemExit as e:
            if e.code:
                raise

    train_net.exit_on_error(main)


def run_config(args):
    from ..engine import launch as train_net
    from ..engine.module_recorder import ModuleRecorder, recording_batches

    def main():
        cfg, trainer_cls = train_net.setup(args)
        if cfg.graph.enabled:  # graph modules cannot take eager hooks: losses only
            train_net.train(cfg, trainer_cls, train_net.build_trainer(cfg, trainer_cls))
            return
        recorder = ModuleRecorder(cfg.train.output_dir)
        trainer = train_net.build_trainer(cfg, recording_batches(trainer_cls, recorder))
        recorder.attach(trainer)
        train_net.train(cfg, trainer_cls, trainer)

    train_net.exit_on_error(main)


def build_parser():
    parser = ToolParser(description=DESCRIPTION, overrides=True,
                        epilog=epilog(exit_codes=EXIT_CODES, examples=EXAMPLES))
    parser.add_argument("--config-file", required=True, nargs="+", metavar="FILE",
                        help="the LiBai LazyConfig (.py) to run (required); several are trained one after another "
                             "in one launch per layout, and compared config by config")
    parser.add_argument("--layouts", nargs="+", required=True, metavar="LAYOUT",
                        help="two or more layouts (see 'layouts' above); the first is the reference, e.g. 1 pp2 "
                             "dp2xpp2 (required)")
    parser.add_argument("--iters", type=int, default=5, metavar="N",
                        help="training iterations per layout (default: %(default)s)")
    parser.add_argument("--rtol", type=float, default=1e-5,
                        help="relative tolerance on the losses and on the recorded modules (default: %(default)g)")
    parser.add_argument("--global-batch", type=int, default=0, metavar="N",
                        help="samples per iteration on every layout (default: the config's micro batch x "
                             "data_parallel_size x accumulation steps)")
    parser.add_argument("--timeout", type=float, default=600, metavar="SECONDS",
                        help="hard limit per layout run; its ranks are killed after it (default: %(default)g)")
    parser.add_argument("--script", default="", metavar="FILE",
                        help="a project's own training script (LiBai's command line: --config-file and overrides, "
                             "as LiBai's projects take it), run on each rank instead of libai-ext-train, its folder "
                             "first on the module path; run the tool from where the script is run (default: none)")
    parser.add_argument("--workdir", default="", metavar="DIR",
                        help="where each layout's run and logs are written (default: a new temporary folder)")
    parser.add_argument("--plot", default="", metavar="PNG",
                        help="also write a PNG: every layout's loss curve overlaid, and each one's relative "
                             "difference from the first layout; with several configs one PNG each, named "
                             "<PNG stem>_<config>.png; needs matplotlib (default: no plot)")
    return parser


def parse_args(argv):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.iters < 1:
        parser.error("--iters must be at least 1")
    require_files(parser, "--config-file", args.config_file)
    args.config_file = [os.path.abspath(config) for config in args.config_file]
    if args.script:
        require_files(parser, "--script", [args.script])
        args.script = os.path.abspath(args.script)
        sys.path.insert(0, os.path.dirname(args.script))  # the config may import the project's modules
    if len(set(map(config_name, args.config_file))) < len(args.config_file):
        parser.error("--config-file: two configs share a file name (their runs would share a folder)")
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == [RANK_FLAG]:
        return rank_main(argv[1:])
    args = parse_args(argv)
    try:
        return check(args)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
