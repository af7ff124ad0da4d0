#!/usr/bin/env python
"""How many distinct libai_ext functions (and modules) one training step and one Dropout forward run.

    PYTHONPATH=$PWD .venv-libai-main/bin/python tools/dev/count_step_functions.py [--iteration 3] [--list] [--out FILE]

* The step: ``configs/demo_swin_digits_cpu.py`` (mixup and cutmix, eager) on pp2 with stage-0-only reading,
  launched on 2 CPU ranks; on rank 0 ``sys.setprofile`` records every Python frame entered during the
  ``run_step`` of iteration ``--iteration`` (loading, ``get_batch``, optimizer) outside the model's ``__call__``
  and autograd's backward; the hooks' ``before_step`` and ``after_step`` of that iteration are counted apart.
* The Dropout: one eager ``libai_ext.random.layers.Dropout(0.1)`` forward in ``"layout_invariant"`` mode on a
  global tensor of 1 rank, inside a trainer's micro-step (``drawing_step``), after one warm-up call.

A function is a code object whose file lies in the ``libai_ext`` package (comprehensions and generator
expressions are their own code objects, so they count); a module is its file.  Prints (and with ``--out``
writes as JSON) both counts; ``--list`` names the functions.
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import libai_ext  # noqa: E402  (after the checkout's path)

PACKAGE = os.path.dirname(os.path.abspath(libai_ext.__file__)) + os.sep


class FunctionCounter:
    """Python frames of libai_ext entered while on, except below the frames ``skip`` names."""

    def __init__(self, skip=lambda frame: False, skip_c=lambda function: False):
        self.skip, self.skip_c = skip, skip_c
        self.functions, self._skipping, self._c_skipping = set(), None, None

    def _event(self, frame, event, arg):
        if self._skipping is not None:
            if event == "return" and frame is self._skipping:
                self._skipping = None
            return
        if self._c_skipping is not None:
            if event in ("c_return", "c_exception") and arg is self._c_skipping:
                self._c_skipping = None
            return
        if event == "call":
            if self.skip(frame):
                self._skipping = frame
                return
            code = frame.f_code
            if code.co_filename.startswith(PACKAGE):
                self.functions.add((os.path.relpath(code.co_filename, os.path.dirname(PACKAGE[:-1])),
                                    code.co_firstlineno, code.co_name))
        elif event == "c_call" and self.skip_c(arg):
            self._c_skipping = arg

    def __enter__(self):
        sys.setprofile(self._event)
        return self

    def __exit__(self, *exc):
        sys.setprofile(None)

    def summary(self, listing=False):
        modules = sorted({f[0] for f in self.functions})
        out = {"functions": len(self.functions), "modules": len(modules), "module_names": modules}
        if listing:
            out["function_names"] = [f"{f}:{line}({name})" for f, line, name in sorted(self.functions)]
        return out


def count_dropout(listing=False):
    import oneflow as flow

    from libai_ext.random import modes
    from libai_ext.random.draws import drawing_step
    from libai_ext.random.layers import Dropout

    modes.set_layer_seed(1234, "layout_invariant")
    layer = Dropout(0.1)
    x = flow.randn(8, 64, placement=flow.placement("cpu", [0]), sbp=flow.sbp.split(0))
    with drawing_step(0):
        layer(x)  # warm-up: caches filled as in a run's later steps
    with drawing_step(1):
        with FunctionCounter() as counter:
            layer(x)
    return counter.summary(listing)


def rank_main(argv):
    """One rank of the pp2 run (under ``oneflow.distributed.launch``)."""
    from libai.config import default_argument_parser
    from libai.utils import distributed as dist
    import oneflow as flow

    from libai_ext.engine import launch

    parser = default_argument_parser()
    parser.add_argument("--iteration", type=int, default=3)
    parser.add_argument("--result", required=True)
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args(argv)
    cfg, trainer_cls = launch.setup(args)
    trainer = launch.build_trainer(cfg, trainer_cls)
    if dist.get_rank() == 0:
        model = trainer.model
        backward = getattr(flow._oneflow_internal.autograd, "backward")
        module_call = flow.nn.Module.__call__.__code__
        counters = {phase: FunctionCounter(
            skip=lambda frame: frame.f_code is module_call and frame.f_locals.get("self") is model,
            skip_c=lambda function: function is backward) for phase in ("run_step", "hooks")}
        for name in ("before_step", "run_step", "after_step"):
            _profile_iteration(trainer, name, args.iteration, counters["run_step" if name == "run_step" else "hooks"])
    launch.train(cfg, trainer_cls, trainer)
    if dist.get_rank() == 0:
        with open(args.result, "w") as f:
            json.dump({phase: c.summary(args.list) for phase, c in counters.items()}, f, indent=1)


def _profile_iteration(trainer, name, iteration, counter):
    original = getattr(trainer, name)

    def profiled():
        if trainer.iter != iteration:
            return original()
        with counter:
            return original()

    setattr(trainer, name, profiled)


def count_step(iteration, listing, timeout):
    import tempfile

    from libai_ext.testing import launch

    workdir = tempfile.mkdtemp(prefix="count-step-")
    result = os.path.join(workdir, "counts.json")
    args = ["--rank-run", "--config-file", os.path.join(ROOT, "configs/demo_swin_digits_cpu.py"),
            "--iteration", iteration, "--result", result] + (["--list"] if listing else []) + [
        f"train.output_dir={workdir}/out", "train.dist.pipeline_parallel_size=2", "train.stage0_only_loading=True",
        f"train.train_iter={iteration + 2}", "train.evaluation.enabled=False", "train.log_period=1000"]
    launch(os.path.abspath(__file__), 2, args, timeout=timeout, workdir=workdir)
    with open(result) as f:
        return json.load(f)


def main():
    if "--rank-run" in sys.argv:
        return rank_main([a for a in sys.argv[1:] if a != "--rank-run"])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iteration", type=int, default=3, help="which iteration of the pp2 run to count")
    parser.add_argument("--list", action="store_true", help="name every function counted")
    parser.add_argument("--timeout", type=int, default=600)
    parser.add_argument("--out", help="write the counts here as JSON")
    args = parser.parse_args()
    step = count_step(args.iteration, args.list, args.timeout)
    counts = {"dropout_forward": count_dropout(args.list), "pp2_mixup_step": step["run_step"],
              "pp2_mixup_step_hooks": step["hooks"]}
    for what, c in counts.items():
        print(f"{what}: {c['functions']} functions in {c['modules']} modules")
        for name in c.get("function_names", c["module_names"]):
            print(f"  {name}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(counts, f, indent=1)


if __name__ == "__main__":
    main()
