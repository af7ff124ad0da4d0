"""Build the keyed-dropout op sketch (keyed_dropout_op.cpp) and check it against libai_ext's counter masks.

    PYTHONPATH=$PWD python tools/fused_op/check_keyed_dropout.py --oneflow-source DIR [--cuda]

DIR: OneFlow's sources (git repository with tag v0.9.0, or a checkout; tools/fused_op/build.py).
`--cuda` also compiles the same file with nvcc (compile only: OneFlow 0.9.0 is a CUDA 11.7 build).

On 2 CPU ranks, with x of float32 and the mask's expectation from `counter_rng.local_keep_mask` (the
host loop of _counter_kernel.c) over the whole shape:
(1) eager, local tensors of several shapes (0-d, 1-d, odd and even columns, 3-d): y and dx bitwise equal
    to `where(keep, x * scale, x * 0)` and `where(keep, scale, 0)`;
(2) eager, global tensors split over each axis, and broadcast: the gathered y equal to (1)'s;
(3) nn.Graph forward on split(1); (4) a train graph (SGD, lr 1): the parameter's step equals minus the
    gradient through the mask.
"""
import argparse
import os
import shutil
import sys
import sysconfig
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import build as op_build  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
SOURCE = os.path.join(HERE, "keyed_dropout_op.cpp")
MODULE = "libai_ext_keyed_dropout"
SHAPES = [(), (9,), (5, 7), (4, 6), (3, 4, 5)]
RATE, SEED = 0.3, 1234


def build(build_dir, oneflow_source, cuda):
    wheel = op_build.wheel_flags()
    compile_flags, link_flags = op_build.repaired_flags(wheel)
    from_source = os.path.join(build_dir, "oneflow-" + op_build.ONEFLOW_TAG)
    copied = op_build.source_headers([SOURCE], oneflow_source, wheel, from_source)
    print(f"{len(copied)} headers taken from OneFlow {op_build.ONEFLOW_TAG}'s sources", flush=True)
    compile_flags += ["-I", from_source]
    module = os.path.join(build_dir, MODULE + sysconfig.get_config_var("EXT_SUFFIX"))
    results = {"g++": op_build.compile_library(SOURCE, compile_flags, link_flags, module,
                                               os.path.join(build_dir, "gxx.log"))}
    if cuda:
        results["nvcc"] = op_build.compile_cuda_object(SOURCE, compile_flags, os.path.join(build_dir, "cuda.o"),
                                                       os.path.join(build_dir, "nvcc.log"))
    return results


def run_checks(build_dir):
    import numpy as np
    import oneflow as flow
    import op_checks

    from libai_ext.random import counter_rng
    from libai_ext.random.layers.stochastic import dropout_scale
    from libai_ext.testing.multirank import write_rank_result

    sys.path.insert(0, build_dir)
    keyed_dropout = __import__(MODULE).keyed_dropout
    keys = counter_rng.stream_keys(SEED, "#0", 3, 0)
    level, scale = counter_rng.keep_level(RATE), dropout_scale(RATE)
    placement = flow.placement("cpu", ranks=[0, 1])

    def drop(x):
        return keyed_dropout(x, list(keys), level, scale)

    def expected(shape, x):
        keep = counter_rng.local_keep_mask(shape, [0] * len(shape), list(shape), keys, RATE).numpy()
        x32 = x.astype(np.float32)
        return np.where(keep, x32 * np.float32(scale), x32 * np.float32(0)), np.where(keep, np.float32(scale), 0)

    def data(shape):
        return (np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) - 7) / 3

    def attempt(check, body):
        try:
            ok, detail = body()
        except Exception as error:  # the finding is the error itself
            ok, detail = False, f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"
        write_rank_result(check=check, ok=bool(ok), detail=detail)

    def eager_local():
        bad = []
        for shape in SHAPES:
            x = flow.tensor(data(shape), requires_grad=True)
            y = drop(x)
            y.sum().backward()
            want_y, want_dx = expected(shape, data(shape))
            if not (np.array_equal(y.numpy(), want_y) and np.array_equal(x.grad.numpy(), want_dx)):
                bad.append(shape)
        kept = expected((64, 64), data((64, 64)))[1].astype(bool).mean()
        return not bad, f"shapes {SHAPES}; mismatched {bad}; kept fraction on 64x64 {kept:.3f} (rate {RATE})"

    def eager_global():
        bad = []
        for shape in [s for s in SHAPES if len(s) >= 1]:
            for sbp in [flow.sbp.split(d) for d in range(len(shape))] + [flow.sbp.broadcast]:
                x = flow.tensor(data(shape), placement=placement, sbp=flow.sbp.broadcast).to_global(sbp=sbp)
                x.requires_grad_()
                y = drop(x)
                y.sum().backward()
                gathered = y.to_global(sbp=flow.sbp.broadcast).to_local().numpy()
                grad = x.grad.to_global(sbp=flow.sbp.broadcast).to_local().numpy()
                want_y, want_dx = expected(shape, data(shape))
                if not (y.sbp == (sbp,) and np.array_equal(gathered, want_y) and np.array_equal(grad, want_dx)):
                    bad.append((shape, str(sbp)))
        return not bad, f"every split axis and broadcast; mismatched {bad}"

    def graph_forward():
        shape = (5, 7)
        x = flow.tensor(data(shape), placement=placement, sbp=flow.sbp.broadcast).to_global(sbp=flow.sbp.split(1))
        y = op_checks.graph_forward(drop, x)
        return (np.array_equal(y.to_global(sbp=flow.sbp.broadcast).to_local().numpy(), expected(shape, data(shape))[0]),
                f"split(1) input, y.sbp {y.sbp}")

    def graph_train():
        shape = (4, 6)
        x = flow.tensor(data(shape), placement=placement, sbp=flow.sbp.broadcast).to_global(sbp=flow.sbp.split(0))
        w = op_checks.train_step(drop, x)
        want = 1 - (data(shape) * expected(shape, data(shape))[1]).sum(0)
        return np.allclose(w, want, rtol=1e-6), f"max |w - expected| {np.abs(w - want).max():.2e}"

    for check, body in [("eager_local", eager_local), ("eager_global", eager_global),
                        ("graph_forward", graph_forward), ("graph_train", graph_train)]:
        attempt(check, body)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--oneflow-source", required=True,
                        help=f"OneFlow's sources (git repository with {op_build.ONEFLOW_TAG}, or checkout)")
    parser.add_argument("--cuda", action="store_true", help="also compile the CUDA kernel with nvcc")
    parser.add_argument("--keep", help="build into this folder and keep it")
    parser.add_argument("--ranks", metavar="BUILD_DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ranks:
        run_checks(args.ranks)
        return
    build_dir = args.keep or tempfile.mkdtemp(prefix="keyed-dropout-")
    os.makedirs(build_dir, exist_ok=True)
    try:
        built = build(build_dir, args.oneflow_source, args.cuda)
        for tool, (ok, seconds, command, error) in built.items():
            print(f"{tool}: {'ok' if ok else 'FAILED: ' + error} in {seconds:.0f} s\n  {' '.join(command)}",
                  flush=True)
        if not built["g++"][0]:
            sys.exit(1)
        sys.path.insert(0, REPO)
        from libai_ext.testing.multirank import launch

        start = time.time()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
        result = launch(os.path.abspath(__file__), 2, args=("--oneflow-source", args.oneflow_source,
                                                             "--ranks", build_dir),
                        timeout=900, check=False, env=env)
        print(f"2 ranks, {time.time() - start:.0f} s, exit codes {result.returncodes}", flush=True)
        records = [result.records(rank) for rank in range(2)]
        failed = False
        for check in ("eager_local", "eager_global", "graph_forward", "graph_train"):
            mine = [next((r for r in rank_records if r["check"] == check), None) for rank_records in records]
            if None in mine:
                failed = True
                print(f"  {check}: NOT REACHED", flush=True)
                continue
            ok = all(r["ok"] for r in mine)
            failed |= not ok
            print(f"  {check}: {'works' if ok else 'FAILS'} - {mine[0]['detail']}", flush=True)
        if failed:
            print(f"rank 0 log tail:\n{result.log(0)[-1500:]}", flush=True)
        sys.exit(1 if failed else 0)
    finally:
        if not args.keep:
            shutil.rmtree(build_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
