"""The compiled pieces: the counter permutation fused into a host loop (libai_ext/random/_counter_kernel.c) and the
keyed-dropout op (libai_ext/random/keyed_op/keyed_dropout.cpp), built against the installed OneFlow wheel.

Everything else is in pyproject.toml.  Each is optional and says so when it cannot be built: without the host
loop, eager CPU masks use OneFlow's int32 ops; without the op, graphs' dropouts do (and the trainer logs which).
"""
import importlib.util
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
KEYED_OP = os.path.join(HERE, "libai_ext", "random", "keyed_op")


def _keyed_op_builder():
    """``keyed_op/build.py`` by path: importing the package would import OneFlow in the build."""
    spec = importlib.util.spec_from_file_location("keyed_op_build", os.path.join(KEYED_OP, "build.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildExtWithKeyedOp(build_ext):
    def run(self):
        super().run()
        builder = _keyed_op_builder()
        # keyed_op/lib/ of the package being built (in place for an editable install)
        folder = os.path.join(os.path.dirname(self.get_ext_fullpath("libai_ext.random.keyed_op.x")), "lib")
        try:
            path = builder.build_library(sys.executable, folder)
            print(f"libai_ext: built the keyed-dropout op: {path}")
        except Exception as error:  # optional, as the host loop is: the int32-op path serves, and says so
            print(f"libai_ext: WARNING: the keyed-dropout op was not built ({error}); graph dropouts will use "
                  "OneFlow int32 ops", file=sys.stderr)
            return
        if not builder.gpu_seen(sys.executable):
            print("libai_ext: no GPU seen: the keyed-dropout op's CUDA kernels are not built")
            return
        try:
            print(f"libai_ext: built its CUDA kernels: {builder.build_cuda_library(sys.executable, folder)}")
        except Exception as error:
            print(f"libai_ext: WARNING: the keyed-dropout op's CUDA kernels were not built ({error}); GPU dropouts "
                  "will use OneFlow int32 ops", file=sys.stderr)


setup(ext_modules=[Extension("libai_ext.random._counter_kernel", ["libai_ext/random/_counter_kernel.c"],
                             include_dirs=[KEYED_OP], extra_compile_args=["-O3"], optional=True)],
      cmdclass={"build_ext": BuildExtWithKeyedOp})
