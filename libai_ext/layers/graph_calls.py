"""Stochastic layers inside ``nn.Graph``: a new mask every step, the one eager mode draws.

A traced graph replays the ops it recorded, and OneFlow 0.9.0 loses a buffer's in-place
updates made inside a graph (``tools/repro/graph_buffer_update.py``): a call counter that the
layers keep themselves is frozen at its trace-time value there.  So the graph is *given* the
counters, as an input it takes at every call:

* while the graph traces, each layer counts its calls within one micro-batch's forward;
* the input is an int32 ``(micro-batches, layers)`` tensor whose entry ``[m, l]`` is layer
  ``l``'s host counter plus ``m`` times its calls per micro-batch.  OneFlow splits every graph
  input into micro-batches under gradient accumulation (measured), so micro-batch ``m`` sees
  row ``m``;
* the ``j``-th call of layer ``l`` draws with counter ``row[l] + j``: the number its eager twin
  reaches at that micro-batch; the keys are hashed from it inside the graph
  (``counter_rng.call_keys``), the same bits as the host's;
* after each graph call the host counters advance by everything the graph drew, so the
  buffers saved with checkpoints, and a resumed run, continue exactly.
"""
import contextlib
import logging

import numpy as np
import oneflow as flow

logger = logging.getLogger(__name__)

COUNTERS_INPUT = "libai_ext_stochastic_counters"
_tracing = None  # the GraphCalls whose graph is being traced now


class GraphCalls:
    """The call counters of a train graph's stochastic ``layers`` (original modules, in order)."""

    def __init__(self, layers, micro_batches=1):
        self.layers = list(layers)
        self.micro_batches = int(micro_batches)
        self._column = {id(layer): index for index, layer in enumerate(self.layers)}
        self.calls_per_micro_batch = None  # known once the graph has been traced
        self._traced_calls = None
        self._counters = None

    def counters(self, device_type):
        """This call's input: every layer's counter per micro-batch, replicated on every rank."""
        per_micro_batch = self.calls_per_micro_batch or [0] * len(self.layers)  # (values unused by a trace)
        start = np.array([layer.current_calls() for layer in self.layers], dtype=np.int64)
        rows = start[None, :] + np.arange(self.micro_batches)[:, None] * np.array(per_micro_batch)[None, :]
        if rows.size and rows.max() >= 2 ** 31:
            raise OverflowError("a stochastic layer's call counter passed 2**31 (int32 in the graph)")
        placement = flow.env.all_device_placement(device_type)
        return flow.tensor(rows.astype(np.int32), placement=placement, sbp=flow.sbp.broadcast)

    @contextlib.contextmanager
    def tracing(self, counters):
        """While the graph traces: layers read ``counters`` (this micro-batch's row) and count calls."""
        global _tracing
        self._traced_calls = [0] * len(self.layers)
        self._counters = counters
        _tracing = self
        try:
            yield
        finally:
            _tracing = None
            self._counters = None
            self.calls_per_micro_batch = self._traced_calls

    def advance(self):
        """After a graph call: every layer's host counter moves past what the graph drew."""
        for layer, calls in zip(self.layers, self.calls_per_micro_batch):
            layer.advance_calls(calls * self.micro_batches)

    def _traced_counter(self, layer, x):
        column = self._column.get(id(layer))
        if column is None or self._counters is None:
            return None, None
        call = self._traced_calls[column]
        self._traced_calls[column] += 1
        counter = self._counters[:, column]
        if x.is_global:
            counter = counter.to_global(placement=x.placement, sbp=[flow.sbp.broadcast] * len(x.sbp))
        else:
            counter = counter.to_local()
        return counter + call, call


def traced_counter(layer, x):
    """``(int32 counter tensor, call index in this micro-batch)`` of ``layer``'s draw for ``x``
    while a ``GraphCalls`` graph traces; ``(None, None)`` in any other graph."""
    if _tracing is None:
        return None, None
    return _tracing._traced_counter(layer, x)
