"""OneFlow 0.9.0: on a rank other than its host's first, two local draws share the CPU generator from two streams.

    python -m oneflow.distributed.launch --nproc_per_node 2 tools/repro/local_draw_streams.py   # ~15 s

On the rank of local index r > 0, the factory ops (`randperm`, `rand`, `randint`, `normal`...) make local tensors on
`cpu:r`, `flow.empty` on `cpu:0`: two streams, run by two threads, and one CPU generator.  flowvision's
`ColorJitter.get_params` queues `flow.randperm(4)`, then `flow.empty(1).uniform_(...)`: on rank 1 the two draws read
the generator in whichever order their streams reach them, so with the same seed the results depend on what
`cpu:1` has queued (a training step's global tensors live there).  The queued work below draws nothing.
"""
import oneflow as flow

from _common import verdict

rank = flow.env.get_rank()
x = flow.randn(500, 500)


def color_jitter_draws(seed, busy_device=None):
    flow.default_generator.manual_seed(seed)
    if busy_device is not None:
        y = x.to(busy_device)
        for _ in range(8):
            y = flow.matmul(y, y) * 1e-3  # keeps that stream busy, draws nothing
    permutation = flow.randperm(4)
    factor = float(flow.empty(1).uniform_(0.6, 1.4).item())
    return permutation.tolist(), round(factor, 6)


quiet = color_jitter_draws(7)
busy = color_jitter_draws(7, busy_device=flow.randperm(1).device)
print(f"rank {rank}: randperm on {flow.randperm(1).device}, empty on {flow.empty(1).device}; "
      f"seed 7 draws {quiet} on a quiet rank, {busy} with work queued on {flow.randperm(1).device}", flush=True)
if rank == 1:
    verdict(quiet != busy, "the same seed gives other ColorJitter draws when the factory ops' stream has work queued")
