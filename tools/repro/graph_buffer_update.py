"""OneFlow 0.9.0: an in-place update of a module buffer inside `nn.Graph` is not kept between calls.

    python tools/repro/graph_buffer_update.py   # one process, ~10 s, OneFlow only

A module counts its calls in an int64 buffer (`self.calls.add_(1)`), as a counter-based
dropout does to draw a fresh mask each step.  Eagerly the buffer goes 1, 2, 3; compiled
in a graph every call sees the initial value again, so such a layer draws the same mask
at every training step.
"""
import oneflow as flow


class Counter(flow.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", flow.zeros((), dtype=flow.int64))

    def forward(self, x):
        seen = self.calls.clone()
        self.calls.add_(1)
        return x + seen.to(x.dtype)


class Once(flow.nn.Graph):
    def __init__(self, module):
        super().__init__()
        self.module = module

    def build(self, x):
        return self.module(x)


eager = Counter()
eager_seen = [int(eager(flow.zeros(1)).item()) for _ in range(3)]
graph_module = Counter()
graph = Once(graph_module)
graph_seen = [int(graph(flow.zeros(1)).item()) for _ in range(3)]
print(f"oneflow {flow.__version__}: counter seen by 3 calls: eager {eager_seen}, graph {graph_seen}; "
      f"buffer after the graph calls: {int(graph_module.calls.item())}")
lost = graph_seen != eager_seen
print(("REPRODUCED: " if lost else "NOT REPRODUCED: ") + "the graph " +
      ("loses" if lost else "keeps") + " the buffer's in-place updates", flush=True)
