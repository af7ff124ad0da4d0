"""Stochastic layers inside ``nn.Graph``: each step draws the masks eager mode draws (docs/randomness.md#graph-mode).

A traced graph freezes what a layer computes on the host (its call counter, the keys hashed from it), and OneFlow
0.9.0 loses a buffer's in-place updates inside a graph (``tools/repro/graph_buffer_update.py``), so a train graph is
*given* its step at every call (``StepFedGraph``): an int32 ``(micro-batches, 3)`` input replicated on every rank,
row ``m`` = ``[step key's two words, m]``.  OneFlow splits every graph input into micro-batches under accumulation
(measured), so micro-batch ``m`` sees row ``m``.  While tracing, a layer's ``j``-th call in a micro-batch's forward
draws ``(step, j)`` with keys computed from that row inside the graph (``counter_rng.call_keys``), rows numbered by
their place in the step (``draws.Step.rows``): eager mode's bits.  A layer traced in a graph that gives it no step
raises ``UnkeyedGraphDraw``: its mask would be frozen.
"""
import contextlib

import numpy as np
import oneflow as flow

from ..draws import step_key
from ..draws import Step

STEP_INPUT = "libai_ext_step"
_tracing = None  # the TracedSteps of the graph being traced now


class UnkeyedGraphDraw(RuntimeError):
    """A stochastic layer traced in an ``nn.Graph`` that does not give it the step."""


class TracedSteps:
    """What the layers of a graph being traced read: the step input and their call counts."""

    def __init__(self, step_input, micro_batches, data_parallel):
        self.step_input = step_input  # (1, 3) per micro-batch while tracing
        self.micro_batches, self.data_parallel = int(micro_batches), int(data_parallel)
        self._calls = {}
        self._shared = {}

    def shared(self, key, compute):
        """``compute()`` once per trace and ``key``: what every layer's draw derives from (the step's hash)."""
        if key not in self._shared:
            self._shared[key] = compute()
        return self._shared[key]

    def draw(self, layer, x):
        """``(Step with the step key and micro as tensors laid out like x, call index)`` of ``layer``'s draw."""
        call = self._calls.get(id(layer), 0)
        self._calls[id(layer)] = call + 1
        hashed, micro = self.shared(("step column", layout_key(x)), lambda: self._step_column(x))
        return Step(None, micro, self.micro_batches, self.data_parallel, hashed=hashed), call

    def _step_column(self, x):
        """``((step key words), micro)`` of this micro-batch laid out like ``x``: one slice of each per layout,
        every draw on that layout reads them (a graph op per draw saved is time saved at every step)."""
        column = self.step_input.reshape(-1)
        if x.is_global:
            column = column.to_global(placement=x.placement, sbp=[flow.sbp.broadcast] * len(x.sbp))
        else:
            column = column.to_local()
        return (column[0:1], column[1:2]), column[2:3]


def layout_key(x):
    """What a tensor computed for ``x``'s draws may be shared by: its placement and sbp's rank, or device."""
    return (str(x.placement), len(x.sbp)) if x.is_global else str(x.device)


def step_input(seed, step, micro_batches, device_type):
    """A graph call's step input: ``[[*step_key(seed, step), m] for each micro-batch m]``, replicated on every
    rank."""
    hashed = step_key(seed, step)
    rows = np.array([[*hashed, m] for m in range(int(micro_batches))], dtype=np.int32)
    placement = flow.env.all_device_placement(device_type)
    return flow.tensor(rows, placement=placement, sbp=flow.sbp.broadcast)


@contextlib.contextmanager
def tracing(step_tensor, micro_batches, data_parallel):
    """While a graph traces: layers draw from ``step_tensor`` (this micro-batch's row)."""
    global _tracing
    _tracing = TracedSteps(step_tensor, micro_batches, data_parallel)
    try:
        yield _tracing
    finally:
        _tracing = None


def shared(key, compute):
    """``TracedSteps.shared`` of the graph being traced (``compute()`` outside one)."""
    return compute() if _tracing is None else _tracing.shared(key, compute)


def traced_draw(layer, x, name=None):
    """``(Step, call)`` of ``layer``'s draw for ``x`` while a ``StepFedGraph`` traces; anywhere else (a graph that
    takes no step) raises ``UnkeyedGraphDraw`` naming the layer (``name``, default its class) and what to do."""
    if _tracing is None:
        raise UnkeyedGraphDraw(
            f"{name or type(layer).__name__} is traced in an nn.Graph that does not give it the training step, so "
            "every step of that graph would draw one frozen mask. Train the graph with "
            "libai_ext.ConsistentBatchTrainer (it feeds the step to whatever graph.train_graph builds: LiBai's "
            "GraphBase, a subclass of it, libai_ext.engine.GraphBase); for a graph you call yourself, derive it "
            "from libai_ext.engine.GraphBase or call libai_ext.feed_step(graph) before its "
            "first call; for an inference graph, put the model in eval() mode.")
    return _tracing.draw(layer, x)
