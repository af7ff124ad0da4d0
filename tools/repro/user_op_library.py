"""OneFlow 0.9.0's wheel cannot build a user op with the flags `oneflow.sysconfig` gives; repaired, it can.

    .venv/bin/python tools/repro/user_op_library.py   # two g++ runs, ~20 s

The op: libai_ext's keyed dropout (`libai_ext/random/keyed_op/keyed_dropout.cpp`), which uses only the wheel's
headers.  Compiled once with `oneflow.sysconfig`'s compile and link flags as they are, and once with the
repairs of `libai_ext/random/keyed_op/build.py`:

* `-I<include>` puts the wheel's copy of CentOS 7 glibc headers (math.h, features.h, ...) before the system's
  (fix: `-idirafter`);
* `-DWITH_CUDA` wants `cuda_fp16.h` (any CUDA toolkit's include dir);
* `glog/logging.h` lives under `include/glog-build` and includes `glog/log_severity.h`, which the wheel lacks,
  and glog is linked into liboneflow with hidden symbols, so the ones its inline CHECKs use must be defined
  (both in `libai_ext/random/keyed_op/shims`);
* the link flags name only `_oneflow_internal`, whose symbols the library does not use, so `--as-needed` drops it
  and every OneFlow symbol is unresolved at load (fix: `-Wl,--no-as-needed`).

The repaired library then loads and runs in eager mode and inside `nn.Graph` (tests/test_keyed_op.py,
tests/test_graph.py).
"""
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from _common import verdict  # noqa: E402


def main():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "keyed_op_build", os.path.join(REPO, "libai_ext", "random", "keyed_op", "build.py"))
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    wheel = build.wheel_flags()
    with tempfile.TemporaryDirectory(prefix="user-op-") as folder:
        plain_ok, _, plain_command, plain_error = build.compile_library(
            build.SOURCE, wheel[1], wheel[2], os.path.join(folder, "plain.so"))
        print(f"oneflow.sysconfig's flags: {'compile' if plain_ok else 'FAIL'}: {plain_error}\n  "
              f"{' '.join(plain_command)}", flush=True)
        fixed_ok, _, fixed_command, fixed_error = build.compile_library(
            build.SOURCE, *build.repaired_flags(wheel), os.path.join(folder, "fixed.so"))
        print(f"repaired flags: {'compile' if fixed_ok else 'FAIL: ' + fixed_error}\n  {' '.join(fixed_command)}",
              flush=True)
    first_error = plain_error.split("error: ", 1)[-1].strip()[:120]
    verdict(not plain_ok and fixed_ok, f"the wheel's sysconfig flags do not compile a user op ({first_error}); "
            f"the repaired flags {'do' if fixed_ok else 'do NOT'}")


if __name__ == "__main__":
    main()
