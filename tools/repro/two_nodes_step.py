"""One global step on 4 ranks (for loopback_two_nodes.sh): a broadcast sum across all ranks."""
import oneflow as flow

rank = flow.env.get_rank()
x = flow.tensor([float(rank)]).to_global(placement=flow.env.all_device_placement("cpu"), sbp=flow.sbp.split(0))
total = x.to_global(sbp=flow.sbp.broadcast).sum().item()
print(f"rank {rank}: sum of ranks = {total}", flush=True)
