"""OneFlow 0.9.0's BatchNorm normalises each data-parallel shard of a global batch with that shard's statistics.

    python -m oneflow.distributed.launch --nproc_per_node 2 tools/repro/batch_norm_shard_statistics.py   # ~20 s

A batch of 8 rows, split along its first axis over 2 ranks (sbp S(0)), through ``nn.BatchNorm1d`` in training: a
batch normalisation over the global batch gives the output and running mean that the whole batch gives on one
rank (computed here on a local copy); OneFlow's kernel gives each half's.
"""
import numpy as np
import oneflow as flow

from _common import verdict

placement = flow.placement("cpu", ranks=list(range(flow.env.get_world_size())))
rows = np.random.RandomState(0).randn(8, 3).astype(np.float32) * 3 + np.arange(8, dtype=np.float32)[:, None]
local = flow.nn.BatchNorm1d(3)
expected, expected_mean = local(flow.tensor(rows)).numpy(), local.running_mean.numpy()
split = flow.nn.BatchNorm1d(3).to_global(placement=placement, sbp=flow.sbp.broadcast)
batch = flow.tensor(rows).to_global(placement=placement, sbp=flow.sbp.broadcast).to_global(sbp=flow.sbp.split(0))
out = split(batch).to_global(sbp=flow.sbp.broadcast).to_local().numpy()
mean = split.running_mean.to_global(sbp=flow.sbp.broadcast).to_local().numpy()
difference = float(np.abs(out - expected).max())
if flow.env.get_rank() == 0:
    verdict(difference > 1e-3, f"BatchNorm1d on a batch split over {flow.env.get_world_size()} ranks: outputs differ "
            f"from the whole batch's by up to {difference:.3g}, running mean {mean.round(3).tolist()} against "
            f"{expected_mean.round(3).tolist()}")
