"""What BatchNorm over the global batch costs: a training step (forward and backward) of a BatchNorm model with
``train.randomness="layout_invariant"`` (statistics of the global batch, ``libai_ext.compat.batch_statistics``)
against ``"fast"`` (OneFlow's kernel, each shard's statistics), as a ratio, data parallel on 1 and 2 ranks.

    .venv/bin/python benchmarks/batch_norm_cost.py --ranks 1 2 --steps 40 --out benchmarks/results/batch_norm_cost.md

The model is MoCo v3's projector as LiBai main's project builds it (``Linear`` without bias, ``BatchNorm1d``,
``ReLU``; three layers, the last BatchNorm without ReLU), ``--width`` wide, on a global batch of ``--batch`` rows
split over the ranks.  The two variants run interleaved, step by step, from a sync to a sync; the table gives rank
0's median and the ratio.  On 1 rank no batch is split and both run OneFlow's kernel: the ratio there is the noise.
"""
import json
import statistics
import time

from report import measure_on_ranks, publish, rank_job_parser  # benchmarks/report.py

VARIANTS = ("fast", "layout_invariant")


# ---- inside each rank ----------------------------------------------------------------------

def time_steps(steps, batch, width, out_path):
    import numpy as np
    import oneflow as flow
    from libai.utils import distributed as dist
    from omegaconf import DictConfig

    from libai_ext.compat import batch_statistics
    from libai_ext.random import modes

    world = flow.env.get_world_size()
    dist.setup_dist_util(DictConfig({"data_parallel_size": world, "tensor_parallel_size": 1,
                                     "pipeline_parallel_size": 1, "pipeline_num_layers": 1}))
    batch_statistics.route_batch_statistics(modes.layout_invariant)
    placement = flow.placement("cpu", ranks=list(range(world)))
    layers = []
    for index in range(3):
        layers += [flow.nn.Linear(width, width, bias=False), flow.nn.BatchNorm1d(width)]
        layers += [flow.nn.ReLU()] if index < 2 else []
    model = flow.nn.Sequential(*layers).to_global(placement=placement, sbp=flow.sbp.broadcast)
    rows = np.random.RandomState(0).randn(batch, width).astype(np.float32)
    x = flow.tensor(rows).to_global(placement=placement, sbp=flow.sbp.broadcast).to_global(sbp=flow.sbp.split(0))
    sync = flow._oneflow_internal.eager.Sync

    def step(variant):
        modes.set_layer_seed(0, variant)
        sync()
        start = time.perf_counter()
        model(x).square().sum().backward()
        for p in model.parameters():
            p.grad.to_local().numpy()  # the gradients exist, on every rank
            p.grad = None
        sync()
        return time.perf_counter() - start

    times = {variant: [] for variant in VARIANTS}
    for index in range(steps + 3):  # three warm-up steps each
        for variant in VARIANTS:
            elapsed = step(variant)
            if index >= 3:
                times[variant].append(elapsed)
    if flow.env.get_rank() == 0:
        with open(out_path, "w") as f:
            json.dump({k: 1e3 * statistics.median(v) for k, v in times.items()}, f)


# ---- the driver ----------------------------------------------------------------------------

def table(results, args):
    lines = [f"MoCo v3's projector (3 x Linear {args.width} + BatchNorm1d), global batch {args.batch} split over the "
             f"ranks, forward and backward, rank 0 median of {args.steps} steps",
             "", "| ranks | fast: each shard's statistics (ms) | layout_invariant: the global batch's (ms) | "
             "layout_invariant / fast |", "|---|---|---|---|"]
    for ranks, ms in results.items():
        lines.append(f"| {ranks} | {ms['fast']:.2f} | {ms['layout_invariant']:.2f} | "
                     f"{ms['layout_invariant'] / ms['fast']:.2f} |")
    return "\n".join(lines) + "\n"


def main():
    parser = rank_job_parser(__doc__)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=256)
    args = parser.parse_args()
    if args.rank_job:
        return time_steps(args.steps, args.batch, args.width, args.rank_job)
    import tempfile

    args.workdir = args.workdir or tempfile.mkdtemp(prefix="batch-norm-cost-")
    results = {ranks: measure_on_ranks(__file__, ranks, ["--steps", args.steps, "--batch", args.batch, "--width", args.width], args.workdir) for ranks in args.ranks}
    publish(table(results, args), args.out, title="BatchNorm over the global batch: the cost of a step")


if __name__ == "__main__":
    main()
