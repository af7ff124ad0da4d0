"""OneFlow 0.9.0's dropout is not SBP-consistent on a global tensor split over one axis, broadcast over the other.

    python -m oneflow.distributed.launch --nproc_per_node 4 tools/repro/dropout_sbp.py   # ~25 s

Placement [[0, 1], [2, 3]], input sbp [S(0), B]: ranks 0 and 1 hold the same rows (so do
2 and 3), ranks 0 and 2 different rows.  A correct dropout gives replicas the same mask
and shards independent masks.  With per-rank seeds (LiBai 0.1.1 leaves ranks unseeded,
main seeds `seed + rank`) replicas draw different masks; with one seed for all ranks,
every shard draws the same mask.  (`flow.rand` with the same sbp is consistent.)
"""
import numpy as np
import oneflow as flow

from _common import layout, verdict

dist = layout(dp=2, tp=2)
rank = flow.env.get_rank()
x = flow.ones(8, 16, placement=dist.get_layer_placement(0), sbp=dist.get_nd_sbp([flow.sbp.split(0),
                                                                                   flow.sbp.broadcast]))


def masks(seed):
    flow.manual_seed(seed)
    local = (flow.nn.functional.dropout(x, 0.5, training=True).to_local().numpy() != 0).astype(np.int8)
    everyone = flow.tensor(local).unsqueeze(0).to_global(placement=flow.env.all_device_placement("cpu"),
                                                         sbp=flow.sbp.split(0))
    return everyone.to_global(sbp=flow.sbp.broadcast).to_local().numpy()


per_rank, same_seed = masks(1234 + rank), masks(1234)
if rank == 0:
    replicas_differ = not np.array_equal(per_rank[0], per_rank[1])
    shards_equal = np.array_equal(same_seed[0], same_seed[2])
    print(f"per-rank seeds: ranks 0 and 1 (replicas) equal masks: {not replicas_differ}; "
          f"one seed: ranks 0 and 2 (shards) equal masks: {shards_equal}")
    verdict(replicas_differ or shards_equal, "dropout on [S(0), B] breaks replicas (per-rank seeds) "
            "or shards (one seed)")
