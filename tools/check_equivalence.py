#!/usr/bin/env python
"""Does the parallel layout change the training?  Run a config on several layouts and compare.

    python tools/check_equivalence.py --config-file configs/demo_pipeline_cpu.py \
        --layouts 1 pp2 tp2 dp2xpp2 --iters 5 [key=value ...]

Each layout trains from the same seed for ``--iters`` iterations on its own CPU ranks
(``libai_ext.testing.launch``, hard timeout), through the same code as ``tools/train_net.py``
plus a ``ModuleRecorder`` (libai_ext/engine/module_recorder.py).  Every layout keeps the first
layout's global batch (``train_micro_batch_size`` = global batch / dp).  Then it prints, per
layout, the largest relative difference of the per-iteration raw loss from the first layout
and the first iteration above ``--rtol``; for that iteration it names the first batch field or
module (in the first layout's forward order) whose output differs, with the size of the
difference, or, if the forward pass agrees, the first gradient that differed one iteration
before.  Exit status 0 when every layout matches, 1 otherwise (2 on a bad argument).

A layout is ``1`` or ``dp<N>``, ``tp<N>``, ``pp<N>`` joined by ``x`` (``dp2xtp2xpp2``).
``key=value`` overrides apply to every layout (e.g. ``train.trainer=libai.engine.DefaultTrainer``).
"""
import argparse
import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

RANK_FLAG = "--as-rank"
AXES = ("dp", "tp", "pp")


class UsageError(ValueError):
    pass


def parse_layout(text):
    """``"dp2xpp2"`` -> ``{"dp": 2, "tp": 1, "pp": 2}``; ``"1"`` -> one rank."""
    sizes = dict.fromkeys(AXES, 1)
    if text == "1":
        return sizes
    for part in text.split("x"):
        match = re.fullmatch(r"(dp|tp|pp)([1-9][0-9]*)", part)
        if not match or sizes[match.group(1)] != 1:
            raise UsageError(f"--layouts: {text!r} is not '1' or dp<N>/tp<N>/pp<N> joined by 'x' (e.g. dp2xpp2)")
        sizes[match.group(1)] = int(match.group(2))
    return sizes


def world_size(sizes):
    return sizes["dp"] * sizes["tp"] * sizes["pp"]


def configured_global_batch(config_file, opts):
    """The global batch of the config as given (micro batch x dp x accumulation)."""
    from libai.config import LazyConfig, try_get_key

    cfg = LazyConfig.apply_overrides(LazyConfig.load(config_file), opts)
    micro = try_get_key(cfg, "train.train_micro_batch_size", default=None)
    if micro is None:
        raise UsageError(f"{config_file}: train.train_micro_batch_size is not set")
    dp = try_get_key(cfg, "train.dist.data_parallel_size", default=1) or 1
    acc = try_get_key(cfg, "train.num_accumulation_steps", default=None) or 1
    return int(micro) * int(dp) * int(acc)


def layout_overrides(sizes, global_batch, iters, output_dir):
    acc_dp = sizes["dp"]
    if global_batch % acc_dp:
        raise UsageError(f"global batch {global_batch} is not divisible by dp={acc_dp}")
    return [f"train.dist.data_parallel_size={sizes['dp']}", f"train.dist.tensor_parallel_size={sizes['tp']}",
            f"train.dist.pipeline_parallel_size={sizes['pp']}",
            f"train.train_micro_batch_size={global_batch // acc_dp}", "train.num_accumulation_steps=1",
            f"train.train_iter={iters}", f"train.output_dir={output_dir}", "train.evaluation.enabled=False",
            "train.log_period=1", "train.checkpointer.period=1000000"]


def run_layout(args, name, sizes, global_batch):
    from libai_ext.testing import launch

    output = os.path.join(args.workdir, name)
    argv = [RANK_FLAG, "--config-file", args.config_file, *args.opts,
            *layout_overrides(sizes, global_batch, args.iters, output)]
    launch(os.path.abspath(__file__), world_size(sizes), argv, timeout=args.timeout,
           workdir=os.path.join(args.workdir, f"{name}-logs"))
    return output


def read_losses(output, iters):
    """Per-iteration raw total loss written by ``RawLossWriter``."""
    from libai_ext.testing import read_raw_losses

    losses = {record["iteration"]: record["total_loss"] for record in read_raw_losses(output)}
    missing = [i for i in range(iters) if i not in losses]
    if missing:
        raise RuntimeError(f"{output}: no loss recorded for iterations {missing}")
    return [losses[i] for i in range(iters)]


def compare_losses(reference, losses, rtol):
    """``(max relative difference, first iteration above rtol or None)``."""
    diffs = [abs(a - b) / max(abs(a), 1e-30) for a, b in zip(reference, losses)]
    first = next((i for i, d in enumerate(diffs) if not d <= rtol), None)
    return max(diffs), first


def first_difference(reference, other, rtol, kinds=("batch", ":out")):
    """The first record (reference order) of the given kinds whose fingerprint differs."""
    from libai_ext.engine.module_recorder import difference

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


def locate(reference_dir, output, iteration, rtol):
    """A sentence naming where the run at ``output`` first departs from the reference."""
    from libai_ext.engine.module_recorder import read_records

    ref, other = read_records(reference_dir), read_records(output)
    if iteration not in ref or iteration not in other:
        return f"no module records for iteration {iteration}"
    found = first_difference(ref[iteration], other[iteration], rtol)
    if found:
        return describe(found, f"iteration {iteration}, forward")
    if iteration > 0 and iteration - 1 in ref and iteration - 1 in other:
        found = first_difference(ref[iteration - 1], other[iteration - 1], rtol, kinds=(":grad",))
        if found:
            return describe(found, f"iteration {iteration - 1}, backward")
    return "every recorded batch field, output and gradient agrees"


def describe(found, where):
    name, relative, absolute = found
    if absolute is None:
        return f"{where}: {name} {relative}"
    return f"{where}: {name} differs (relative {relative:.3g}, max abs {absolute:.3g})"


def check(args):
    layouts = {name: parse_layout(name) for name in args.layouts}
    if len(layouts) < 2:
        raise UsageError("--layouts needs at least two different layouts (the first is the reference)")
    global_batch = args.global_batch or configured_global_batch(args.config_file, args.opts)
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="check-equivalence-")
    outputs, losses = {}, {}
    for name, sizes in layouts.items():
        print(f"running {name} on {world_size(sizes)} rank(s) ...", flush=True)
        outputs[name] = run_layout(args, name, sizes, global_batch)
        losses[name] = read_losses(outputs[name], args.iters)
    reference = args.layouts[0]
    print(f"\nper-iteration raw loss vs {reference} ({args.iters} iterations, global batch {global_batch}, "
          f"rtol {args.rtol:g}); runs in {args.workdir}")
    print("| layout | ranks | max relative difference | first diverging iteration | first difference |")
    print("|---|---|---|---|---|")
    all_match = True
    for name in args.layouts[1:]:
        worst, first = compare_losses(losses[reference], losses[name], args.rtol)
        where = "-" if first is None else locate(outputs[reference], outputs[name], first, args.rtol)
        all_match &= first is None
        print(f"| {name} | {world_size(layouts[name])} | {worst:.3g} | {'-' if first is None else first} | {where} |")
    print("\nall layouts match" if all_match else "\nlayouts differ")
    return 0 if all_match else 1


def rank_main(argv):
    """One rank: ``tools/train_net.py``'s body plus a ModuleRecorder."""
    from libai.config import default_argument_parser

    from libai_ext.engine import launch as train_net
    from libai_ext.engine.module_recorder import ModuleRecorder, recording_batches

    def main():
        args = default_argument_parser().parse_args(argv)
        cfg, trainer_cls = train_net.setup(args)
        if cfg.graph.enabled:
            raise ValueError("graph.enabled=True: check_equivalence records modules with eager hooks; "
                             "run it with graph.enabled=False")
        recorder = ModuleRecorder(cfg.train.output_dir)
        trainer = train_net.build_trainer(cfg, recording_batches(trainer_cls, recorder))
        recorder.attach(trainer)
        train_net.train(cfg, trainer_cls, trainer)

    train_net.exit_on_error(main)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config-file", required=True)
    parser.add_argument("--layouts", nargs="+", required=True, help="the first is the reference, e.g. 1 pp2 tp2")
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--rtol", type=float, default=1e-5, help="relative tolerance on losses and modules")
    parser.add_argument("--global-batch", type=int, default=0, help="default: the config's micro batch x dp")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per layout run")
    parser.add_argument("--workdir", default="", help="where runs are written (default: a new temp folder)")
    parser.add_argument("opts", nargs="*", metavar="key=value", help="overrides for every layout")
    # Overrides may come anywhere, before or after options: they are the words with a '=' that
    # are not options themselves.
    overrides = [a for a in argv if "=" in a and not a.startswith("-")]
    args = parser.parse_args([a for a in argv if a not in overrides])
    args.opts = overrides
    if args.iters < 1:
        parser.error("--iters must be at least 1")
    if not os.path.isfile(args.config_file):
        parser.error(f"--config-file {args.config_file!r} does not exist")
    args.config_file = os.path.abspath(args.config_file)
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [RANK_FLAG]:
        return rank_main(argv[1:])
    args = parse_args(argv)
    try:
        return check(args)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
