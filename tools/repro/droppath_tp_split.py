"""`libai.layers.DropPath` fails on tensor-parallel-split inputs (sbp [B, S(1)]).

    python -m oneflow.distributed.launch --nproc_per_node 2 tools/repro/droppath_tp_split.py   # ~20 s

DropPath draws one keep/drop per sample as a random tensor of shape (batch, 1, ...) with
the input's sbp; a size-1 axis cannot be split over 2 ranks, so OneFlow's shape check fails
("(1 vs 2)" here; "Expected size at split axis ..." for other shapes), and a Swin with
tensor-parallel blocks cannot use it.
"""
import oneflow as flow
import libai.layers

from _common import layout, libai_version, message, verdict

dist = layout(tp=2)
x = flow.ones(4, 8, placement=dist.get_layer_placement(0), sbp=dist.get_nd_sbp([flow.sbp.broadcast,
                                                                                  flow.sbp.split(1)]))
try:
    libai.layers.DropPath(0.5).train()(x)
    result = (False, f"libai {libai_version()}: DropPath on [B, S(1)] works")
except Exception as e:
    result = (True, f"libai {libai_version()}: DropPath on [B, S(1)] -> {message(e)}")
if flow.env.get_rank() == 0:
    verdict(*result)
