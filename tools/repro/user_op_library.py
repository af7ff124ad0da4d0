"""OneFlow 0.9.0's wheel cannot build a user op as `oneflow.sysconfig` says; with fixes, the op runs everywhere.

    python tools/repro/user_op_library.py --oneflow-source DIR   # one build + two 2-rank launches, ~3-5 min

DIR is OneFlow's source (a git repository holding the tag v0.9.0, or a checkout of it): the gradient
function's headers are not in the wheel.  Without it, the second variant below is skipped.

The op: `y = x * 2` with a CPU kernel (tools/repro/user_op_library.cpp), built with g++ into a shared
library, in two variants that register the op under different names:

* **dispatch** (the wheel's headers only): op and kernel in C++, loaded with `flow.utils.load_library`;
  Python builds the op with `flow._oneflow_internal.one.OpBuilder` and dispatches it through
  `flow._C.dispatch_ofrecord_bytes_decoder` (the one functor that takes a tensor and sets only a string
  attribute, here the op's "name"); the backward is a `flow.autograd.Function` calling the op on dy.
* **op_expr**: plus a C++ `OpExprGradFunction` (`REGISTER_OP_EXPR_GRAD_FUNCTION`) and a Python entry point
  in the same library, imported as an extension module.  Its headers come from DIR.

Each variant runs on 2 CPU ranks: (1) eager on a local tensor, forward and backward; (2) eager on a global
tensor split over rows, forward and backward; (3) inside an `nn.Graph` forward; (4) a train graph (SGD,
lr 1) whose parameter's step must be minus the gradient.  Plus the raw dispatch with no gradient function.

What the wheel's flags lack (each fix measured; the script prints the first error of the plain flags):
`-I<include>` puts the wheel's copy of CentOS 7 glibc headers (math.h, features.h, ...) before the
system's (fix: `-idirafter`); `-DWITH_CUDA` wants `cuda_fp16.h` (any CUDA toolkit's include dir);
`glog/logging.h` lives under `include/glog-build` and includes `glog/log_severity.h`, which the wheel lacks;
glog is linked into liboneflow with hidden symbols, so the 8 its inline CHECKs use must be defined (both
in tools/fused_op/shims, the flags in tools/fused_op/build.py); the link
flags name only `_oneflow_internal`, whose symbols the library does not use, so `--as-needed` drops it
and every OneFlow symbol is unresolved at load (fix: `-Wl,--no-as-needed`).
"""
import argparse
import os
import shutil
import sys
import sysconfig
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tools", "fused_op"))
import build as op_build  # noqa: E402  (tools/fused_op/build.py)

SOURCE = os.path.join(HERE, "user_op_library.cpp")
VARIANTS = {"dispatch": "libai_ext_scale_dispatch", "op_expr": "libai_ext_scale"}
MODULE = "libai_ext_user_op"  # the op_expr library's Python module name (PyInit_libai_ext_user_op)
CHECKS = ("eager_local", "eager_global", "graph_forward", "graph_train")


def build(build_dir, oneflow_source):
    wheel = op_build.wheel_flags()
    _, compile_flags, link_flags, _ = wheel
    plain = op_build.compile_library(SOURCE, compile_flags, link_flags, os.path.join(build_dir, "plain.so"),
                                     os.path.join(build_dir, "plain.log"))
    results = {"plain": plain}
    fixed_compile, fixed_link = op_build.repaired_flags(wheel)
    results["dispatch"] = op_build.compile_library(
        SOURCE, fixed_compile + [f'-DLIBAI_EXT_SCALE_OP="{VARIANTS["dispatch"]}"'], fixed_link,
        os.path.join(build_dir, "dispatch.so"), os.path.join(build_dir, "dispatch.log"))
    if oneflow_source:
        from_source = os.path.join(build_dir, "oneflow-" + op_build.ONEFLOW_TAG)
        copied = op_build.source_headers([SOURCE], oneflow_source, wheel, from_source)
        print(f"op_expr: {len(copied)} headers taken from OneFlow {op_build.ONEFLOW_TAG}'s sources "
              f"(not in the wheel): {' '.join(copied)}", flush=True)
        module = os.path.join(build_dir, MODULE + sysconfig.get_config_var("EXT_SUFFIX"))
        results["op_expr"] = op_build.compile_library(
            SOURCE, fixed_compile + ["-I", from_source, "-DLIBAI_EXT_WITH_OP_EXPR",
                                     f'-DLIBAI_EXT_SCALE_OP="{VARIANTS["op_expr"]}"'],
            fixed_link, module, os.path.join(build_dir, "op_expr.log"))
    return results


# ---------------------------------------------------------------- the ranks' checks


def scale_function(variant, build_dir):
    import oneflow as flow

    if variant == "op_expr":
        sys.path.insert(0, build_dir)
        module = __import__(MODULE)
        return module.scale, None
    flow.utils.load_library(os.path.join(build_dir, "dispatch.so"))
    op = flow._oneflow_internal.one.OpBuilder(VARIANTS[variant], VARIANTS[variant] + "_0") \
        .input("x", 1).output("y", 1).build()

    def dispatch(x):
        return flow._C.dispatch_ofrecord_bytes_decoder(op, x, "")

    class Scale(flow.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return dispatch(x)

        @staticmethod
        def backward(ctx, dy):
            return dispatch(dy)

    return Scale.apply, dispatch


def run_checks(variant, build_dir):
    import numpy as np
    import oneflow as flow
    import op_checks

    from _common import message
    from libai_ext.testing.multirank import write_rank_result

    scale, raw = scale_function(variant, build_dir)
    rank = flow.env.get_rank()
    placement = flow.placement("cpu", ranks=[0, 1])
    data = np.arange(12, dtype=np.float32).reshape(4, 3) - 5

    def record(check, ok, detail=""):
        write_rank_result(variant=variant, check=check, ok=bool(ok), detail=detail)

    def attempt(check, body):
        try:
            ok, detail = body()
        except Exception as error:  # the finding is the error itself
            ok, detail = False, message(error, 300)
        record(check, ok, detail)

    def global_x(requires_grad=False):
        x = flow.tensor(data, placement=placement, sbp=flow.sbp.broadcast).to_global(sbp=flow.sbp.split(0))
        return x.requires_grad_() if requires_grad else x

    def eager_local():
        x = flow.tensor(data + rank, requires_grad=True)
        y = scale(x)
        y.sum().backward()
        return (np.array_equal(y.numpy(), 2 * (data + rank)) and np.all(x.grad.numpy() == 2),
                "y == 2x, dx == 2")

    def eager_global():
        x = global_x(requires_grad=True)
        y = scale(x)
        y.sum().backward()
        local = x.to_local().numpy()
        ok = (y.sbp == (flow.sbp.split(0),) and np.array_equal(y.to_local().numpy(), 2 * local)
              and np.all(x.grad.to_local().numpy() == 2))
        return ok, f"y.sbp {y.sbp}, this rank's rows {local.shape[0]}"

    def graph_forward():
        y = op_checks.graph_forward(scale, global_x())
        return np.array_equal(y.to_global(sbp=flow.sbp.broadcast).to_local().numpy(), 2 * data), f"y.sbp {y.sbp}"

    def graph_train():
        w = op_checks.train_step(scale, global_x())
        expected = 1 - 2 * data.sum(0)
        return np.allclose(w, expected), f"w after one step {w.tolist()} (expected {expected.tolist()})"

    for check, body in zip(CHECKS, (eager_local, eager_global, graph_forward, graph_train)):
        attempt(check, body)
    if raw is not None:
        def raw_backward():
            x = flow.tensor(data, requires_grad=True)
            raw(x).sum().backward()
            return True, "backward ran"

        attempt("raw_backward_without_grad_function", raw_backward)


# ---------------------------------------------------------------- driver


def launch_checks(variant, build_dir):
    sys.path.insert(0, REPO)  # libai_ext from this checkout when PYTHONPATH has none
    from libai_ext.testing.multirank import launch

    start = time.time()
    result = launch(os.path.abspath(__file__), 2, args=("--ranks", variant, build_dir), timeout=600, check=False,
                    env=dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [
                        REPO, HERE, os.environ.get("PYTHONPATH")]))))
    records = {rank: result.records(rank) for rank in range(2)}
    print(f"{variant}: 2 ranks, {time.time() - start:.0f} s, exit codes {result.returncodes}", flush=True)
    outcome = {}
    for check in CHECKS + ("raw_backward_without_grad_function",):
        by_rank = [next((r for r in records[rank] if r["check"] == check), None) for rank in range(2)]
        if all(r is None for r in by_rank):
            if check in CHECKS or variant == "dispatch":
                outcome[check] = False
                print(f"  {check}: NOT REACHED (rank 0 log tail: {result.log(0)[-600:]!r})", flush=True)
            continue
        ok = all(r is not None and r["ok"] for r in by_rank)
        outcome[check] = ok
        detail = next(r["detail"] for r in by_rank if r is not None)
        print(f"  {check}: {'works' if ok else 'FAILS'} - {detail}", flush=True)
    return outcome


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--oneflow-source",
                        help=f"OneFlow's sources (git repository with {op_build.ONEFLOW_TAG}, or checkout)")
    parser.add_argument("--keep", help="build into this folder and keep it")
    parser.add_argument("--ranks", nargs=2, metavar=("VARIANT", "BUILD_DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ranks:
        run_checks(*args.ranks)
        return

    build_dir = args.keep or tempfile.mkdtemp(prefix="user-op-")
    os.makedirs(build_dir, exist_ok=True)
    try:
        built = build(build_dir, args.oneflow_source)
        plain_ok, plain_s, plain_cmd, plain_error = built["plain"]
        print(f"oneflow.sysconfig's flags alone: {'compile' if plain_ok else 'FAIL'} ({plain_s:.0f} s): "
              f"{plain_error or ''}\n  {' '.join(plain_cmd)}", flush=True)
        outcomes = {}
        for variant in VARIANTS:
            if variant not in built:
                print(f"{variant}: skipped (no --oneflow-source)", flush=True)
                continue
            ok, seconds, command, error = built[variant]
            print(f"{variant}: build {'ok' if ok else 'FAILED: ' + error} in {seconds:.0f} s\n  {' '.join(command)}",
                  flush=True)
            if ok:
                outcomes[variant] = launch_checks(variant, build_dir)
        from _common import verdict

        failing = [f"{variant}:{check}" for variant, checks in outcomes.items() for check, ok in checks.items()
                   if not ok and check in CHECKS]
        first_error = plain_error.split("error: ", 1)[-1].strip()[:120]
        verdict(not plain_ok, f"the wheel's sysconfig flags do not compile a user op ({first_error})"
                + (f"; failing uses after the fixes: {', '.join(failing)}" if failing
                   else "; with the fixes every use works"))
    finally:
        if not args.keep:
            shutil.rmtree(build_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
