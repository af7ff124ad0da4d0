"""What mixing the global batch costs: ``ConsistentBatchTrainer.get_batch`` time with the global
batch mixup ("layout_invariant") vs flowvision's local one ("fast"), as a ratio, on 1 and 2 ranks.

    .venv/bin/python benchmarks/mixup_cost.py --ranks 1 2 --calls 40 --out benchmarks/results/mixup_cost.md

Each rank holds a micro-batch of ``--micro-batch`` CIFAR-sized images (data parallel over all
ranks, one stage), and the recipe's mixup (mixup 0.8 / cutmix 1.0, switch 0.5, smoothing 0.1,
100 classes).  Variants run interleaved, call by call: ``none`` (no mixup), ``local``, ``global``;
each time is one ``get_batch`` call from a sync to a sync, call ``i`` at step ``i`` (mixup and cutmix
both occur).  The table gives rank 0's median and the ratio global / local.
"""
import json
import statistics
import time

from report import measure_on_ranks, publish, rank_job_parser  # benchmarks/report.py

VARIANTS = ("none", "local", "global")


# ---- inside each rank ----------------------------------------------------------------------

def time_get_batch(calls, micro_batch, image_size, out_path):
    import numpy as np
    import oneflow as flow
    from libai.data.structures import DistTensorData, Instance
    from libai.utils import distributed as dist
    from omegaconf import DictConfig

    import libai_ext
    from libai_ext import ConsistentBatchTrainer, mixup_step
    from libai_ext.data import build_mixup
    from libai_ext.random import modes

    libai_ext.apply_patches()
    dist.setup_dist_util(DictConfig({"data_parallel_size": flow.env.get_world_size(), "tensor_parallel_size": 1,
                                     "pipeline_parallel_size": 1, "pipeline_num_layers": 1}))
    sync = flow._oneflow_internal.eager.Sync
    rng = np.random.RandomState(flow.env.get_rank())
    images = rng.randn(micro_batch, 3, image_size, image_size).astype(np.float32)
    labels = rng.randint(0, 100, size=micro_batch)
    mixup = build_mixup(100)

    def call(variant, step):
        modes.set_layer_seed(0, "fast" if variant == "local" else "layout_invariant")
        data = Instance(images=DistTensorData(flow.tensor(images), placement_idx=0),
                        labels=DistTensorData(flow.tensor(labels), placement_idx=-1))
        sync()
        start = time.perf_counter()
        with mixup_step(step):
            batch = ConsistentBatchTrainer.get_batch(data, mixup_func=None if variant == "none" else mixup)
        for tensor in batch.values():
            tensor.to_local().numpy()  # the values exist, on every rank
        sync()
        return time.perf_counter() - start

    times = {variant: [] for variant in VARIANTS}
    for step in range(calls + 2):  # two warm-up calls each
        for variant in VARIANTS:
            elapsed = call(variant, step)
            if step >= 2:
                times[variant].append(elapsed)
    if flow.env.get_rank() == 0:
        with open(out_path, "w") as f:
            json.dump({k: 1e3 * statistics.median(v) for k, v in times.items()}, f)


# ---- the driver ----------------------------------------------------------------------------

def table(results, args):
    lines = [f"get_batch, {args.micro_batch} images of 3x{args.image_size}x{args.image_size} per rank (data parallel), "
             f"rank 0 median of {args.calls} calls",
             "", "| ranks | no mixup (ms) | local mixup (ms) | global mixup (ms) | global / local |",
             "|---|---|---|---|---|"]
    for ranks, ms in results.items():
        lines.append(f"| {ranks} | {ms['none']:.2f} | {ms['local']:.2f} | {ms['global']:.2f} | "
                     f"{ms['global'] / ms['local']:.2f} |")
    return "\n".join(lines) + "\n"


def main():
    parser = rank_job_parser(__doc__)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--micro-batch", type=int, default=32)
    parser.add_argument("--image-size", type=int, default=32)
    args = parser.parse_args()
    if args.rank_job:
        return time_get_batch(args.calls, args.micro_batch, args.image_size, args.rank_job)
    import tempfile

    args.workdir = args.workdir or tempfile.mkdtemp(prefix="mixup-cost-")
    results = {ranks: measure_on_ranks(__file__, ranks, ["--calls", args.calls, "--micro-batch", args.micro_batch, "--image-size", args.image_size], args.workdir) for ranks in args.ranks}
    publish(table(results, args), args.out, title="Global mixup: the cost of get_batch")


if __name__ == "__main__":
    main()
