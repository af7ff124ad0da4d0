"""The keyed-dropout op (``libai_ext.random.keyed_op``): a "layout_invariant" dropout in one pass.

* Built at install (``setup.py``) with the OneFlow wheel's headers only; its per-element function is
  ``counter_hash.h``, which the host loop of ``_counter_kernel.c`` includes too (so tests/test_counter_rng.py's
  checks of the host loop, indices past 2**32 included, check the op's hash).
* Eager, on local tensors and micro-batches of a step, and on global tensors of 4 ranks (every split axis,
  broadcast and partial sum, hierarchies (4,), (2, 2), (1, 4) and (4, 1)): ``y`` and ``dx`` bitwise those of the mask
  ``counter_rng.local_keep_mask`` draws (the specification's bits) applied by ``apply_keep``.
* In graphs it is what libai_ext's ``Dropout`` runs: tests/test_graph.py counts its ops in the compiled job and
  holds every graph step to the eager masks (pp2, two micro-batches); LiBai's models in graph mode follow
  1 rank there and in tests/test_graph_libai.py.
* It serves graphs on every device and eager calls off the CPU (eager CPU ranks keep the host loop); where it
  cannot (not built, no kernel for the device or dtype) the int32-op path does, and a step-fed graph's build
  says which path it takes.
* Its CUDA kernel compiles with the ``nvcc`` on the host (compile only: OneFlow 0.9.0 is a CUDA 11.7 build and
  no GPU is here); ``make gpu-check`` runs it on GPUs.
"""
import logging
import os
import shutil
from types import SimpleNamespace

import numpy as np
import oneflow as flow
import pytest

from conftest import rank_script, records_of_every_rank
from libai_ext.random import counter_rng, keyed_op
from libai_ext.random.global_index import StepRows
from libai_ext.random.keyed_op import build
from libai_ext.random.layers.stochastic import apply_keep, dropout_scale

def cannot_build():
    """Why this host cannot build the op (then its tests skip), or None (then an op not built fails them)."""
    try:
        build.cuda_home()
    except build.BuildError as error:
        return str(error)
    return None if shutil.which("g++") else "no g++"


pytestmark = pytest.mark.skipif(not keyed_op.load() and cannot_build() is not None,
                                reason=f"this host cannot build it: {cannot_build()}")

SHAPES = [(), (9,), (5, 7), (4, 6), (3, 4, 5), (2, 3, 1), (1, 1), (3, 1025)]


def data(shape):
    return (np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) - 7) / 3


@pytest.mark.parametrize("rate", [0.1, 0.5, 1.0])
@pytest.mark.parametrize("micro,micro_batches", [(0, 1), (1, 3), (6, 7)])
def test_eager_output_and_gradient_are_the_keyed_masks(rate, micro, micro_batches):
    keys = counter_rng.stream_keys(1234, "encoder.dropout", 3, 1)
    level, scale = counter_rng.keep_level(rate), dropout_scale(rate)
    rows = StepRows(micro_batches, micro) if micro_batches > 1 else None
    for shape in SHAPES:
        keep = counter_rng.local_keep_mask(shape, [0] * len(shape), list(shape), keys, rate, rows=rows)
        x = flow.tensor(data(shape), requires_grad=True)
        y = keyed_op.keyed_dropout(x, keys, level, scale, micro)
        y.sum().backward()
        assert np.array_equal(y.numpy(), apply_keep(flow.tensor(data(shape)), keep, scale).numpy()), shape
        assert np.array_equal(x.grad.numpy(), np.where(keep.numpy(), np.float32(scale), 0)), shape


def test_every_ranks_box_on_every_sbp_and_hierarchy_is_the_one_rank_mask(tmp_path):
    """Eager global tensors on 4 ranks (rank_scripts/keyed_op_boxes.py): each rank computes its own slice, from the
    placement's hierarchy and the sbp, of the 1-rank mask, for y and dx."""
    from libai_ext.testing import launch

    result = launch(rank_script("keyed_op_boxes.py"), 4, timeout=300, workdir=str(tmp_path / "logs"))
    for rank, (record,) in records_of_every_rank(result, count=1).items():
        assert record["cases"] > 200 and record["mismatched"] == [], (rank, record)


def test_float64_is_served_and_other_dtypes_are_not():
    x = flow.tensor(data((4, 6)), dtype=flow.float64)
    keys = counter_rng.stream_keys(7, "#0", 0)
    keep = counter_rng.local_keep_mask((4, 6), [0, 0], [4, 6], keys, 0.3)
    y = keyed_op.keyed_dropout(x, keys, counter_rng.keep_level(0.3), dropout_scale(0.3))
    assert y.dtype == flow.float64 and np.array_equal(y.numpy(), apply_keep(x, keep, dropout_scale(0.3)).numpy())
    assert keyed_op.serves(x) and not keyed_op.serves(x.to(flow.float16))


def fake(device, dtype):
    return SimpleNamespace(is_global=False, device=SimpleNamespace(type=device), dtype=dtype)


def test_each_device_branch_of_serves(monkeypatch):
    """A CUDA tensor is served only where the CUDA kernels were loaded (``make gpu-check`` builds them)."""
    monkeypatch.setattr(keyed_op, "KERNELS", {"cpu": (flow.float32, flow.float64)})
    assert keyed_op.serves(fake("cpu", flow.float32)) and not keyed_op.serves(fake("cuda", flow.float32))
    monkeypatch.setattr(keyed_op, "KERNELS", {"cpu": (flow.float32,), "cuda": (flow.float32, flow.float16)})
    assert keyed_op.serves(fake("cuda", flow.float16)) and not keyed_op.serves(fake("cpu", flow.float64))


def test_the_build_log_names_the_path_of_each_host(monkeypatch):
    """A GPU host without the CUDA kernels is told how to build them; with them, eager GPU masks run the op too."""
    keyed_op.load()
    monkeypatch.setattr(flow.cuda, "is_available", lambda: False)
    assert keyed_op.status() == (True, "the keyed-dropout op computes graphs' dropout masks in one pass")
    monkeypatch.setattr(flow.cuda, "is_available", lambda: True)
    loaded, what = keyed_op.status()
    assert loaded and "on GPUs OneFlow int32 ops do" in what and "keyed_op.build --cuda" in what
    monkeypatch.setitem(keyed_op._library, "cuda", "/a/built/_keyed_dropout_cuda.so")
    assert keyed_op.status()[1].endswith("in graphs, and eagerly on GPUs")


def test_which_calls_run_the_op(monkeypatch):
    """Graphs on any device and eager calls off the CPU (eager CPU ranks keep the host loop); element-wise masks
    only (DropPath's per-sample masks take the int32 ops)."""
    from libai_ext.random.layers.stochastic import runs_keyed_op

    monkeypatch.setattr(keyed_op, "KERNELS", {"cpu": (flow.float32,), "cuda": (flow.float32,)})

    def call(device, lazy):
        return SimpleNamespace(is_global=False, is_lazy=lazy, device=SimpleNamespace(type=device), dtype=flow.float32)

    assert runs_keyed_op(call("cpu", True), None) and runs_keyed_op(call("cuda", True), None)
    assert runs_keyed_op(call("cuda", False), None) and not runs_keyed_op(call("cpu", False), None)
    assert not runs_keyed_op(call("cuda", True), (4, 1))


def test_without_the_library_the_int_op_path_serves_and_the_build_says_so(monkeypatch, caplog):
    from libai_ext.engine import graph as engine_graph

    monkeypatch.setattr(keyed_op, "_library", {"path": None, "error": "not built here (a test)"})
    assert not keyed_op.serves(flow.ones(2, 3))
    loaded, what = keyed_op.status()
    assert not loaded and "int32 ops" in what and "not built here (a test)" in what
    engine_graph.log_mask_path.cache_clear()
    with caplog.at_level(logging.INFO, logger="libai_ext.engine.graph"):
        engine_graph.feed_step(flow.nn.Graph())
    assert "dropout masks in graphs and on GPUs use OneFlow int32 ops" in caplog.text
    engine_graph.log_mask_path.cache_clear()


def test_a_library_that_does_not_load_is_said_not_raised(tmp_path, monkeypatch):
    monkeypatch.setattr(keyed_op, "_library", {"path": None, "error": None})
    broken = tmp_path / "broken.so"
    broken.write_bytes(b"not a library")
    assert not keyed_op.load(str(broken))
    assert "did not load" in keyed_op.status()[1] and str(broken) in keyed_op.status()[1]


@pytest.mark.long
def test_the_cuda_kernel_compiles(tmp_path):
    try:
        compile_flags, _ = build.repaired_flags(build.wheel_flags())
        nvcc = os.path.join(build.cuda_home(), "bin", "nvcc")
    except build.BuildError as error:
        pytest.skip(str(error))
    if not os.path.exists(nvcc):
        pytest.skip(f"no {nvcc}")
    ok, _, command, error = build.compile_cuda_object(build.SOURCE, compile_flags, str(tmp_path / "cuda.o"))
    assert ok, f"{error}\n{' '.join(command)}"
