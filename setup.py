"""The one compiled piece: the counter permutation fused into a host loop (libai_ext/random/_counter_kernel.c).

Everything else is in pyproject.toml.  Without a C compiler the package still works: libai_ext
falls back to OneFlow's int32 ops for CPU masks (the path graphs and GPUs take), more slowly.
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("libai_ext.random._counter_kernel", ["libai_ext/random/_counter_kernel.c"],
                             extra_compile_args=["-O3"], optional=True)])
