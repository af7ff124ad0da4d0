"""OneFlow 0.9.0: on a rank outside a 0-dim global tensor's placement, ``to_local()`` holds one element.

    python -m oneflow.distributed.launch --nproc_per_node 2 tools/repro/zero_dim_outside_placement.py   # ~15 s

A rank outside a global tensor's placement holds none of it: ``to_local()`` of a vector placed on rank 0 is empty
on rank 1.  A 0-dim tensor's local part there still has shape ``[]``, one element no one wrote (a BatchNorm's
``num_batches_tracked`` on another pipeline stage): reading it gives whatever the memory held.
"""
import oneflow as flow

from _common import verdict

placement = flow.placement("cpu", ranks=[0])
scalar = flow.tensor(7, dtype=flow.long).to_global(placement=placement, sbp=flow.sbp.broadcast)
vector = flow.zeros(3).to_global(placement=placement, sbp=flow.sbp.broadcast)
if flow.env.get_rank() == 1:
    verdict(scalar.to_local().numel() == 1 and vector.to_local().numel() == 0,
            f"rank 1, outside placement ranks=[0]: a vector's local part has {vector.to_local().numel()} elements, "
            f"a 0-dim tensor's {scalar.to_local().numel()} (value {int(scalar.to_local().numpy())}, never written)")
