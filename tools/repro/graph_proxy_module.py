"""LiBai 0.1.1's `GraphBase` reads `module.origin`, which OneFlow 0.9.0's `ProxyModule` no longer has.

    python tools/repro/graph_proxy_module.py    # one process, ~10 s

Every `graph.enabled=True` run of LiBai 0.1.1 on OneFlow 0.9.0 fails while building the
graph ("'ProxyModule' object 'model' in nn.Graph has no attribute 'origin'").  In 0.9.0
the module is reached with `proxy.to(flow.nn.Module)`.  LiBai main handles both.
"""
import oneflow as flow
from libai.models.utils.graph_base import GraphBase

from _common import message, layout, libai_version, verdict

dist = layout()
model = flow.nn.Linear(4, 2).to_global(placement=dist.get_layer_placement(0), sbp=flow.sbp.broadcast)
try:
    GraphBase(model, flow.optim.SGD(model.parameters(), lr=0.1), is_train=True)
    verdict(False, f"libai {libai_version()} GraphBase builds on oneflow {flow.__version__}")
except AttributeError as e:
    verdict(True, f"libai {libai_version()} GraphBase on oneflow {flow.__version__} -> {message(e)}")
