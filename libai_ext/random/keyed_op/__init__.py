"""The keyed-dropout op: a "layout_invariant" dropout mask computed and applied in one pass (docs/performance.md).

``keyed_dropout.cpp`` (built at install by ``setup.py`` against the OneFlow wheel's headers: ``build.py``) registers
the user op ``libai_ext_keyed_dropout``: each element's keep decision from its global position (``counter_hash.h``,
the bits of ``counter_spec``), each rank finding its own slice from the placement and sbp.  Here it is loaded and
dispatched through ``flow.autograd.Function`` (its gradient is the same op on ``dy``), eagerly and in ``nn.Graph``.
``serves(x)`` says whether it has a kernel for x's device and dtype (else ``counter_rng.keep_mask``'s int32 ops);
``status()`` says which path masks take, and why, for the trainer's build log.

May import OneFlow and its own ``build``; nothing else of libai_ext.
"""
import functools
import inspect
import os

import numpy as np
import oneflow as flow
import oneflow.sysconfig  # noqa: F401 (flow.sysconfig)


OP = "libai_ext_keyed_dropout"
# The devices and dtypes the loaded libraries have kernels for (keyed_dropout.cpp's REGISTER_KEYED_DROPOUT_KERNEL):
# the CPU ones always, the CUDA ones where their library was built (``build.build_cuda_library``) and a GPU is seen.
CUDA_DTYPES = (flow.float32, flow.float64, flow.float16, flow.bfloat16)
KERNELS = {"cpu": (flow.float32, flow.float64)}
_library = {"path": None, "error": None, "cuda": None}


def _library_path(cuda=False):
    # (imported here: ``python -m libai_ext.random.keyed_op.build`` runs that module after this package's import)
    from .build import CUDA_LIBRARY, LIBRARY, library_path
    return library_path(flow.sysconfig.get_lib(), name=CUDA_LIBRARY if cuda else LIBRARY)


def load(path=None):
    """Load the op library once (default: the one built in ``lib/`` for this OneFlow), and its CUDA kernels where
    OneFlow sees a GPU and they were built; returns whether the op is loaded."""
    if _library["path"] is None and _library["error"] is None:
        path = path or _library_path()
        if not os.path.exists(path):
            _library["error"] = (f"{os.path.basename(path)} was not built (no g++, CUDA headers or importable OneFlow "
                                 "at install): build it with python -m libai_ext.random.keyed_op.build")
        else:
            try:
                flow.utils.load_library(path)
                _library["path"] = path
            except Exception as error:  # an ABI or loader error: the int32 ops still serve
                _library["error"] = f"{path} did not load: {type(error).__name__}: {error}"
        if _library["path"] is not None and flow.cuda.is_available():
            load_cuda()
    return _library["path"] is not None


def load_cuda(path=None):
    """Load the CUDA kernels (``build.build_cuda_library``) after the op; returns whether CUDA tensors are served."""
    path = path or _library_path(cuda=True)
    if _library["cuda"] is None and os.path.exists(path):
        flow.utils.load_library(path)
        _library["cuda"] = path
        KERNELS["cuda"] = CUDA_DTYPES
    return _library["cuda"] is not None


def status():
    """``(loaded, what)``: which path dropout masks take in graphs and on GPUs, as a sentence for the build log."""
    if not load():
        return False, f"dropout masks in graphs and on GPUs use OneFlow int32 ops (about 30 passes): {_library['error']}"
    if _library["cuda"]:
        return True, "the keyed-dropout op computes dropout masks in one pass: in graphs, and eagerly on GPUs"
    if flow.cuda.is_available():
        return True, ("the keyed-dropout op computes CPU graphs' dropout masks in one pass; on GPUs OneFlow int32 "
                      "ops do, until its CUDA kernels are built (python -m libai_ext.random.keyed_op.build --cuda)")
    return True, "the keyed-dropout op computes graphs' dropout masks in one pass"


def serves(x):
    """Whether the op computes ``x``'s mask: the library loaded and a kernel for x's device type and dtype."""
    device = (x.placement.type if x.is_global else x.device.type)
    return x.dtype in KERNELS.get(device, ()) and load()


@functools.lru_cache(maxsize=None)
def _op(scale):
    """The op expression for one float32 ``scale`` (an attribute fixed when the expression is built)."""
    return (flow._oneflow_internal.one.OpBuilder(OP, f"{OP}_{scale!r}")
            .input("x", 1).input("keys", 1).output("y", 1)
            .attr("scale", f"at_float: {float(np.float32(scale))!r}")
            .build())


@functools.lru_cache(maxsize=None)
def _unwrapped(function):
    return inspect.unwrap(function)


def _dispatch(op, x, keys, level):
    # The one dispatch function of OneFlow 0.9.0 that takes two tensors and sets a single int64 attribute.  Its
    # own op samples, so libai_ext's routing of OneFlow's random ops wraps it: the op here draws nothing.
    dispatch = _unwrapped(flow._C.dispatch_distributed_partial_fc_sample)
    return dispatch(op, x, keys, int(level))[0]


@functools.lru_cache(maxsize=None)
def _function(scale, level):
    op = _op(scale)

    class KeyedDropout(flow.autograd.Function):
        @staticmethod
        def forward(ctx, x, keys):
            ctx.save_for_backward(keys)
            return _dispatch(op, x, keys, level)

        @staticmethod
        def backward(ctx, dy):
            keys, = ctx.saved_tensors
            return _dispatch(op, dy, keys, level), None

    return KeyedDropout


def key_tensor(keys, micro, like):
    """The op's keys input, int32 ``(6,)``: ``keys`` (C, a, d1, d2, d3: ints, or one-element int32 tensors inside
    a graph) and the micro-batch ``micro`` (an int or a one-element tensor), laid out where ``like`` is."""
    layout = (dict(placement=like.placement, sbp=[flow.sbp.broadcast] * len(like.sbp)) if like.is_global
              else dict(device=like.device))
    words = list(keys) + [micro]
    if not any(isinstance(w, flow.Tensor) for w in words):
        return flow.tensor(np.array([int(w) for w in words], dtype=np.int64).astype(np.int32), dtype=flow.int32,
                           **layout)
    parts = [w.reshape(1).to(flow.int32) if isinstance(w, flow.Tensor)
             else flow.tensor([int(w)], dtype=flow.int32, **layout) for w in words]
    return flow.cat(parts)


def keyed_dropout(x, keys, level, scale, micro=0):
    """``x`` with the keyed mask of ``keys`` applied in one pass (``counter_rng.local_keep_mask`` over x's global
    shape, then the scale): ``level`` is ``counter_rng.keep_level(rate)``, ``micro`` the micro-batch of a step."""
    if not load():
        raise RuntimeError(f"libai_ext's keyed-dropout op is not loaded: {status()[1]}")
    return _function(float(np.float32(scale)), int(level)).apply(x, key_tensor(keys, micro, x))
