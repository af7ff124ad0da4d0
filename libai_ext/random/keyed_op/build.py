"""Build the keyed-dropout op library (``keyed_dropout.cpp``) against the installed OneFlow wheel's headers.

Run by ``setup.py`` at install and by ``make gpu-check``; OneFlow is queried in a child Python, never imported here.
``oneflow.sysconfig``'s flags alone do not compile (docs/upstream-bugs.md section 37): the wheel's include dir goes
after the system's (``-idirafter``: it ships CentOS 7 glibc headers), its glog headers (``include/glog-build``) need
``shims/glog/log_severity.h`` and the symbols of ``shims/glog_symbols.h``, ``-DWITH_CUDA`` needs a CUDA toolkit's
``cuda_fp16.h``, and the link needs ``--no-as-needed``.
"""
import hashlib
import json
import os
import subprocess
import sys
import sysconfig
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "keyed_dropout.cpp")
SHIMS = os.path.join(HERE, "shims")
LIBRARY = "_keyed_dropout"  # + the interpreter's extension suffix, beside this file: the op and its CPU kernel
CUDA_LIBRARY = "_keyed_dropout_cuda"  # its CUDA kernels (built where a GPU and nvcc are: make gpu-check)
# No package: Python's module finders (pkgutil.walk_packages) must not take a library for an extension module.
LIBRARY_FOLDER = os.path.join(HERE, "lib")
COMMON = ["-std=c++14", "-O2", "-DNDEBUG", "-fPIC"]


class BuildError(RuntimeError):
    """Why the op library could not be built here."""


def library_path(oneflow_lib, folder=None, name=LIBRARY):
    """Where the library built for the OneFlow installed at ``oneflow_lib`` lies: it links that installation's
    ``_oneflow_internal`` (each venv builds and loads its own, from one checkout)."""
    tag = hashlib.blake2b(os.path.realpath(oneflow_lib).encode(), digest_size=5).hexdigest()
    return os.path.join(folder or LIBRARY_FOLDER, f"{name}-{tag}{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}")


def wheel_flags(python=sys.executable):
    """``(include dir, compile flags, link flags, lib dir)`` as ``oneflow.sysconfig`` gives them to ``python``."""
    query = ("import oneflow.sysconfig as s, json; "
             "print(json.dumps([s.get_include(), s.get_compile_flags(), s.get_link_flags(), s.get_lib()]))")
    proc = subprocess.run([python, "-c", query], capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"{python} cannot import oneflow.sysconfig: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def gpu_seen(python=sys.executable):
    """Whether ``python``'s OneFlow sees a CUDA device (where the CUDA kernels are worth building)."""
    proc = subprocess.run([python, "-c", "import oneflow; print(oneflow.cuda.is_available())"], capture_output=True,
                          text=True)
    return proc.returncode == 0 and proc.stdout.strip().endswith("True")


def cuda_home():
    for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if root and os.path.exists(os.path.join(root, "include", "cuda_fp16.h")):
            return root
    raise BuildError("no cuda_fp16.h (the wheel's headers are built WITH_CUDA): set CUDA_HOME to a CUDA toolkit")


def repaired_flags(wheel):
    """``(compile flags, link flags)``: the wheel's, repaired (see the module's docstring)."""
    include, compile_flags, link_flags, lib = wheel
    compile_flags = [flag for flag in compile_flags if not flag.startswith("-I")]
    compile_flags += ["-idirafter", include, "-idirafter", os.path.join(include, "glog-build"), "-I", SHIMS, "-I", HERE,
                      "-I", os.path.join(cuda_home(), "include"),
                      "-I", os.path.join(lib, "..", "nvidia", "cublas", "include"),  # the nvidia-cublas-cu11 wheel's
                      "-I", sysconfig.get_paths()["include"]]
    return compile_flags, ["-Wl,--no-as-needed", *link_flags, f"-Wl,-rpath,{lib}"]


def _run(command, log):
    start = time.time()
    proc = subprocess.run(command, capture_output=True, text=True)
    if log:
        with open(log, "w") as f:
            f.write(" ".join(command) + "\n\n" + proc.stdout + proc.stderr)
    errors = [line for line in (proc.stdout + proc.stderr).splitlines() if "error" in line]
    return proc.returncode == 0, time.time() - start, command, errors[0] if errors else ""


def compile_library(source, compile_flags, link_flags, output, log=None):
    """g++ ``source`` into the shared library ``output``: ``(ok, seconds, command, first error line)``."""
    return _run(["g++", *COMMON, "-shared", *compile_flags, source, "-o", output, *link_flags], log)


def compile_cuda_object(source, compile_flags, output, log=None, arch="sm_80"):
    """nvcc ``source`` (as CUDA) into an object file, compile only: ``(ok, seconds, command, first error)``."""
    nvcc = os.path.join(cuda_home(), "bin", "nvcc")
    host = []
    # cuRAND's and nvJPEG's types, which the wheel's CUDA headers name, for a toolkit without those libraries
    # (after every other include dir: a toolkit's own headers win).
    flags = iter(compile_flags + ["-idirafter", os.path.join(SHIMS, "cuda_stubs")])
    for flag in flags:  # nvcc knows no -idirafter: hand it to the host compiler, which also preprocesses
        host += [f"-Xcompiler=-idirafter,{next(flags)}"] if flag == "-idirafter" else [flag]
    # CUDA 12+ headers need C++17; the OneFlow headers compile as C++17 too.
    return _run([nvcc, "-x", "cu", "-std=c++17", "-O2", "-DNDEBUG", "-Xcompiler=-fPIC", f"-arch={arch}", "-c",
                 *host, source, "-o", output], log)


def _install(built, output):
    os.replace(built, output)  # whole or not at all: a venv may be loading it, another building its own
    return output


def build_library(python=sys.executable, folder=LIBRARY_FOLDER, log=None):
    """Build the op and its CPU kernel for ``python``'s OneFlow into ``folder``; returns the library's path or
    raises ``BuildError`` saying why not."""
    wheel = wheel_flags(python)
    output = library_path(wheel[3], folder)
    os.makedirs(folder, exist_ok=True)
    built = f"{output}.{os.getpid()}.tmp"
    ok, _, _, error = compile_library(SOURCE, *repaired_flags(wheel), built, log)
    if not ok:
        raise BuildError(f"g++ failed: {error or 'see ' + str(log)}")
    return _install(built, output)


def build_cuda_library(python=sys.executable, folder=LIBRARY_FOLDER, log=None, arch="sm_80"):
    """Build the CUDA kernels (the same source, compiled by nvcc, linked against the CUDA runtime) into ``folder``;
    the op itself and its CPU kernel are ``build_library``'s, loaded first."""
    wheel = wheel_flags(python)
    output = library_path(wheel[3], folder, CUDA_LIBRARY)
    os.makedirs(folder, exist_ok=True)
    built = f"{output}.{os.getpid()}.tmp"
    compile_flags, link_flags = repaired_flags(wheel)
    ok, _, _, error = compile_cuda_object(SOURCE, compile_flags, built + ".o", log, arch)
    if not ok:
        raise BuildError(f"nvcc failed: {error or 'see ' + str(log)}")
    cuda_lib = os.path.join(cuda_home(), "lib64")
    ok, _, _, error = _run(["g++", "-shared", built + ".o", "-o", built, *link_flags, f"-L{cuda_lib}", "-lcudart",
                            f"-Wl,-rpath,{cuda_lib}"], log)
    os.remove(built + ".o")
    if not ok:
        raise BuildError(f"linking the CUDA kernels failed: {error}")
    return _install(built, output)


if __name__ == "__main__":  # python -m libai_ext.random.keyed_op.build [--cuda]
    print(build_cuda_library() if "--cuda" in sys.argv[1:] else build_library())
