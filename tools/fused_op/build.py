"""Build a OneFlow 0.9.0 user-op library with g++ (and compile its CUDA kernels with nvcc) outside OneFlow.

`oneflow.sysconfig`'s flags alone do not compile (tools/repro/user_op_library.py shows each repair):
the wheel's include dir goes after the system's (`-idirafter`: it ships CentOS 7 glibc headers), its glog
headers are under `include/glog-build` and need `shims/glog/log_severity.h`, `-DWITH_CUDA` needs a CUDA
toolkit's `cuda_fp16.h`, and the link needs `--no-as-needed`.  A library that registers gradient
functions or calls ops from C++ (`op_expr.h`) also needs headers the wheel lacks, taken from OneFlow's
v0.9.0 sources (`source_headers`).
"""
import json
import os
import re
import subprocess
import sys
import sysconfig
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHIMS = os.path.join(HERE, "shims")
ONEFLOW_TAG = "v0.9.0"
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
COMMON = ["-std=c++14", "-O2", "-DNDEBUG", "-fPIC"]


def wheel_flags():
    """``(include dir, compile flags, link flags, lib dir)`` as ``oneflow.sysconfig`` gives them."""
    # In a child: importing oneflow here would start its runtime in the driver for nothing.
    query = ("import oneflow.sysconfig as s, json; "
             "print(json.dumps([s.get_include(), s.get_compile_flags(), s.get_link_flags(), s.get_lib()]))")
    out = subprocess.run([sys.executable, "-c", query], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def cuda_home():
    for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if root and os.path.exists(os.path.join(root, "include", "cuda_fp16.h")):
            return root
    raise SystemExit("no cuda_fp16.h: set CUDA_HOME to a CUDA toolkit (the wheel's headers are built WITH_CUDA)")


def repaired_flags(wheel):
    """``(compile flags, link flags)``: the wheel's, repaired (see the module's docstring)."""
    include, compile_flags, link_flags, lib = wheel
    compile_flags = [flag for flag in compile_flags if not flag.startswith("-I")]
    compile_flags += ["-idirafter", include, "-idirafter", os.path.join(include, "glog-build"), "-I", SHIMS, "-I", HERE,
                      "-I", os.path.join(cuda_home(), "include"),
                      "-I", os.path.join(lib, "..", "nvidia", "cublas", "include"),  # the nvidia-cublas-cu11 wheel's
                      "-I", sysconfig.get_paths()["include"]]
    return compile_flags, ["-Wl,--no-as-needed", *link_flags, f"-Wl,-rpath,{lib}"]


class OneFlowSource:
    """OneFlow's sources at ONEFLOW_TAG: a git repository (read with git show) or a checkout."""

    def __init__(self, path):
        self.path = path
        tag = subprocess.run(["git", "-C", path, "rev-parse", "--verify", "-q", ONEFLOW_TAG + "^{commit}"],
                             capture_output=True, text=True)
        self.git = tag.returncode == 0
        if self.git:
            names = subprocess.run(["git", "-C", path, "ls-tree", "-r", "--name-only", ONEFLOW_TAG, "oneflow/"],
                                   capture_output=True, text=True, check=True).stdout.split()
            self.files = set(names)
        elif not os.path.isdir(os.path.join(path, "oneflow", "core")):
            raise SystemExit(f"--oneflow-source {path}: neither a git repository with tag {ONEFLOW_TAG} "
                             "nor a OneFlow checkout (no oneflow/core)")

    def has(self, name):
        return name in self.files if self.git else os.path.isfile(os.path.join(self.path, name))

    def read(self, name):
        if self.git:
            return subprocess.run(["git", "-C", self.path, "show", f"{ONEFLOW_TAG}:{name}"],
                                  capture_output=True, text=True, check=True).stdout
        with open(os.path.join(self.path, name)) as f:
            return f.read()


def source_headers(sources, oneflow_source, wheel, out_dir):
    """Copy into ``out_dir`` every header reachable from ``sources`` that only OneFlow's sources have;
    return their names.  (Includes under any #if are followed: a superset, harmless.)"""
    include = wheel[0]
    search = [SHIMS, HERE, include, os.path.join(include, "glog-build"), os.path.dirname(os.path.abspath(sources[0]))]
    tree = OneFlowSource(oneflow_source)
    todo = []
    for path in sources:
        with open(path) as f:
            todo += INCLUDE.findall(f.read())
    seen, copied = set(), []
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        found = next((os.path.join(d, name) for d in search if os.path.isfile(os.path.join(d, name))), None)
        if found:
            with open(found, errors="replace") as f:
                text = f.read()
        elif tree.has(name):
            text = tree.read(name)
            os.makedirs(os.path.dirname(os.path.join(out_dir, name)), exist_ok=True)
            with open(os.path.join(out_dir, name), "w") as f:
                f.write(text)
            copied.append(name)
        else:  # the compiler's own (or absent, and then reported by it)
            continue
        todo.extend(INCLUDE.findall(text))
    return sorted(copied)


def _run(command, log):
    start = time.time()
    proc = subprocess.run(command, capture_output=True, text=True)
    with open(log, "w") as f:
        f.write(" ".join(command) + "\n\n" + proc.stdout + proc.stderr)
    errors = [line for line in (proc.stdout + proc.stderr).splitlines() if "error" in line]
    return proc.returncode == 0, time.time() - start, command, errors[0] if errors else ""


def compile_library(source, compile_flags, link_flags, output, log):
    """g++ ``source`` into the shared library ``output``: ``(ok, seconds, command, first error line)``."""
    return _run(["nice", "-n", "19", "g++", *COMMON, "-shared", *compile_flags, source, "-o", output, *link_flags],
                log)


def compile_cuda_object(source, compile_flags, output, log, arch="sm_80"):
    """nvcc ``source`` (as CUDA) into an object file, compile only: ``(ok, seconds, command, first error)``."""
    nvcc = os.path.join(cuda_home(), "bin", "nvcc")
    host = []
    flags = iter(compile_flags)
    for flag in flags:  # nvcc knows no -idirafter: hand it to the host compiler, which also preprocesses
        host += [f"-Xcompiler=-idirafter,{next(flags)}"] if flag == "-idirafter" else [flag]
    # CUDA 12+ headers need C++17; the OneFlow headers compile as C++17 too.
    return _run(["nice", "-n", "19", nvcc, "-x", "cu", "-std=c++17", "-O2", "-DNDEBUG", "-Xcompiler=-fPIC",
                 f"-arch={arch}", "-c", *host, source, "-o", output], log)
