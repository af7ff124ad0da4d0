"""OneFlow 0.9.0: `table[index]` on a [B, S(1)] parameter (dp x tp) gives a gradient without the data-parallel sum.

    python -m oneflow.distributed.launch --nproc_per_node 4 tools/repro/table_index_grad.py   # ~30 s

Placement [[0, 1], [2, 3]]: the table (like Swin's relative position bias table, heads
split over tp) is [B, S(1)], the activations [S(0), B] (batch split over dp).  The
gradient of `(x * table[index]).sum()` must sum over the whole batch; `flow.index_select`
gets it right, getitem does not.
"""
import numpy as np
import oneflow as flow

from _common import layout, verdict

dist = layout(dp=2, tp=2)
placement = dist.get_layer_placement(0)
sbp = dist.get_nd_sbp


def gradient(pick):
    table = flow.nn.Parameter(flow.ones(5, 4, placement=placement, sbp=sbp([flow.sbp.broadcast, flow.sbp.split(1)])))
    index = flow.tensor([0, 1, 1, 3], placement=placement, sbp=sbp([flow.sbp.broadcast, flow.sbp.broadcast]))
    x = flow.arange(8 * 4 * 4, dtype=flow.float32).reshape(8, 4, 4) / 100
    x = x.to_global(placement=placement, sbp=sbp([flow.sbp.broadcast, flow.sbp.broadcast]))
    x = x.to_global(sbp=sbp([flow.sbp.split(0), flow.sbp.broadcast]))
    (x * pick(table, index)).sum().backward()
    return table.grad.to_global(sbp=sbp([flow.sbp.broadcast, flow.sbp.broadcast])).to_local().numpy()


x = np.arange(8 * 4 * 4, dtype=np.float32).reshape(8, 4, 4) / 100
expected = np.zeros((5, 4), dtype=np.float32)
np.add.at(expected, [0, 1, 1, 3], x.sum(0))
getitem = gradient(lambda t, i: t[i])
index_select = gradient(lambda t, i: flow.index_select(t, 0, i))
if flow.env.get_rank() == 0:
    print(f"oneflow {flow.__version__}: max |grad - expected|: getitem {np.abs(getitem - expected).max():.4g}, "
          f"index_select {np.abs(index_select - expected).max():.4g} (expected grad sum {expected.sum():.4g}, "
          f"getitem {getitem.sum():.4g})")
    verdict(not np.allclose(getitem, expected, rtol=1e-5), "table[index] gradient misses the data-parallel sum")
