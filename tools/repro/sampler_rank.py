"""Under data x pipeline parallelism LiBai's samplers read the wrong shard for the placement.

    python -m oneflow.distributed.launch --nproc_per_node 4 tools/repro/sampler_rank.py   # ~25 s

dp=2, pp=2: stage 0 is ranks [0, 1] (its data-parallel shards 0 and 1), stage 1 ranks
[2, 3].  `get_batch` makes images global on stage 0's placement, so rank r contributes
shard (r % (dp*tp)) // tp.  LiBai's samplers use `dist.get_data_parallel_rank()`, i.e.
`rank // (tp*pp)` (0.1.1) or `(rank // (tp*pp)) % dp` (main): ranks 0 and 1 both read
shard 0 (the global batch holds every sample twice) and the labels, made global on stage 1,
come from shard 1's samples.
"""
import oneflow as flow

from _common import layout, libai_version, verdict

dist = layout(dp=2, pp=2)
rank = flow.env.get_rank()
libai_shard = dist.get_data_parallel_rank()
stage0 = dist.get_layer_placement(0).ranks.flatten().tolist()
stage1 = dist.get_layer_placement(-1).ranks.flatten().tolist()
placement_shard = (stage0 if rank in stage0 else stage1).index(rank)  # position along its stage's dp axis
everyone = flow.tensor([[rank, libai_shard, placement_shard]]).to_global(
    placement=flow.env.all_device_placement("cpu"), sbp=flow.sbp.split(0)).to_global(sbp=flow.sbp.broadcast)
if rank == 0:
    rows = everyone.to_local().numpy().tolist()
    print(f"libai {libai_version()}: stage 0 {stage0}, stage 1 {stage1}")
    for r, libai_s, placement_s in rows:
        print(f"  rank {r}: sampler shard (get_data_parallel_rank) {libai_s}, shard in its placement {placement_s}")
    verdict(any(a != b for _, a, b in rows), "samplers read other shards than the placements hold")
