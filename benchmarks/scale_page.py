"""docs/scale.md: what libai_ext costs at 1,024 ranks and 175B parameters, from costs measured on this host.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/scale_page.py --out docs/scale.md

Measured here, side by side in one process (ratios, not this host's times, are what carries over):
the initial-weight re-draw (``counter_rng.counter_normal``, the global-op path of ``param_init``) against
OneFlow's ``flow.randn`` per element; the ops, bytes and eager launches ``benchmarks/mask_count.py`` counts; the bytes of one rank's random state (``rng_state.capture_rng_state``)
and of the data position (``data.position.DataPosition``) as checkpoints store them.  Projected from GPT-3
175B's shapes on (dp 32, tp 8, pp 4): local parameters per rank, and the counted memory traffic at a GPU's HBM
bandwidth.
"""
import argparse
import os
import pickle
import statistics
import sys
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.mask_count import count_all, native_backward_bytes, step_bytes  # noqa: E402
from libai_ext.random.counter_rng import GPU_LAUNCH_BYTES, chunk_words  # noqa: E402
from benchmarks.report import command_line, host  # noqa: E402
from libai_ext.random.param_init import DEFAULT_REBUILD_LIMIT_GIB  # noqa: E402

H, LAYERS, HEADS, SEQ, BATCH, VOCAB = 12288, 96, 96, 2048, 1536, 51200  # GPT-3 175B; vocabulary padded for tp 8
DP, TP, PP = 32, 8, 4
HBM_BYTES_PER_S = 2.0e12  # an A100 80GB's HBM2e, about 2 TB/s (NVIDIA's data sheet)
STEP_FLOPS = 6 * 175e9 * BATCH * SEQ  # forward + backward, 6 flops per parameter and token
GPU_FLOPS = 312e12 * 0.5  # an A100's dense bf16 peak at 50 % utilisation


def local_parameters():
    """Parameters one rank of stage 0 holds at (32, 8, 4): its layers' weights split by tp, the word embedding."""
    per_layer = 12 * H * H / TP + (3 * H + H + 4 * H + H) / TP + 4 * H  # weights, split biases, norms
    layers = LAYERS // PP
    return int(layers * per_layer + VOCAB * H / TP + SEQ * H)


def per_element_ns(run, elements, repeats=5):
    times = []
    for _ in range(repeats):
        start = time.process_time()
        run()
        times.append((time.process_time() - start) / elements * 1e9)
    return statistics.median(times)


def measure_init(exponent):
    import oneflow as flow

    from libai_ext.random.counter_rng import counter_normal, derive_keys
    n = 2 ** exponent
    keys = (derive_keys(1, "param_init", "w", 0), derive_keys(1, "param_init", "w", 1))
    ours = per_element_ns(lambda: counter_normal((n // 1024, 1024), keys, device="cpu").to(flow.float32).numpy(), n)
    native = per_element_ns(lambda: flow.randn(n // 1024, 1024).numpy(), n)
    return ours, native


def measure_checkpoint_bytes():
    from libai_ext.random.global_order import GlobalOrderBatchSampler
    from libai_ext.data.position import DataPosition
    from libai_ext.random.rng_state import capture_rng_state

    rng = len(pickle.dumps(dict(capture_rng_state(), layout={"dp": DP, "tp": TP, "pp": PP})))
    dataset = types.SimpleNamespace(__len__=lambda self: 10 ** 9)
    sized = type("Sized", (), {"__len__": lambda self: 10 ** 9})()
    sampler = GlobalOrderBatchSampler(sized, 12, consumed_samples=0, data_parallel_size=DP, seed=1234,
                                      num_accumulation_steps=4)
    position = DataPosition(types.SimpleNamespace(sampler=sampler, delivered=sampler.position)).state_dict()
    del dataset
    return rng, len(pickle.dumps(position))


def page(exponent):
    init_ns, randn_ns = measure_init(exponent)
    rng_bytes, position_bytes = measure_checkpoint_bytes()
    params = local_parameters()
    counts = count_all()
    sites = counts["sites"]
    masks = sum(row["uses"] * row["elements"] for row in sites.values())
    seconds = {(path, bf16): step_bytes(counts, path, bf16) / HBM_BYTES_PER_S
               for path in ("int ops", "graph", "keyed op", "native") for bf16 in (False, True)}
    launches = sum(row["launches"] * row["uses"] for row in sites.values())
    probs, init = sites["attention-probs dropout"]["int ops"], counts["init"]
    graph = sites["attention-probs dropout"]["graph"]
    fused = sites["attention-probs dropout"]["keyed op"]
    fused_launches = sum(row["uses"] * 2 for row in sites.values())
    init_s = params * init["bytes"][False] / HBM_BYTES_PER_S
    native_forward = sites["attention-probs dropout"]["native"]["bytes"][False] + 1  # + the mask it keeps inside
    step_s = STEP_FLOPS / (DP * TP * PP) / GPU_FLOPS
    command = command_line()
    world = DP * TP * PP
    return f"""# libai_ext at 1,024 ranks and 175B parameters

What the layout-invariant guarantee costs at GPT-3 175B's size on (dp 32, tp 8, pp 4) = 1,024 ranks, global
batch 1,536 sequences of 2,048 tokens. No host here has 1,024 ranks or a GPU: every figure is a per-element or
per-rank cost measured on this host, times a count from the model's shapes, or a projection from an op count
and a bandwidth; each says which. This page is generated:

    {command}

(host: {host()}). That the guarantee itself holds on these layouts is checked rank by rank by
`libai-ext-simulate-layout --layout 32,8,4 --model gpt3-175b` ([tools](tools.md)).

## Initial weights: the re-draw on each rank

Each rank re-draws only its own shards (`random/param_init.py`): at (32, 8, 4) a rank of stage 0 holds
{params / 1e9:.2f} billion parameters (its 24 layers' weights split by tp 8, the word embedding's
share). Measured here, side by side: the keyed normal (`counter_rng.counter_normal`: each value a pure function of the seed and
its global position, float64 Box-Muller on two streams) costs **{init_ns / randn_ns:.1f}x** the CPU time per element of `flow.randn` at
2^{exponent} elements (a ratio: this host's times are taken under load), so the re-draw of {params / 1e9:.2f}
billion parameters costs that multiple of an ordinary random init of the same shards. On a GPU it is memory-bound:
{init["passes"]} passes and {init["bytes"][False]:.0f} bytes per element, counted (`benchmarks/mask_count.py`), {init_s:.1f} s
per rank at HBM bandwidth. The ranks draw in parallel: the re-draw grows with the parameters per rank only.

## Dropout masks: their share of a step

Graphs, and eager ranks off the CPU, mask and apply a dropout in one op each way where libai_ext's keyed-dropout op
is built (`random/keyed_op`: at install for CPU; its CUDA kernels by `python -m libai_ext.random.keyed_op.build
--cuda`, which `make gpu-check` runs). It reads x and writes y, {fused["bytes"][False]:.0f} bytes per element forward
and {fused["backward"]["bytes"][False]:.0f} backward (fp32), one launch each way: {fused_launches} launches per rank
and step. Where it is not built, masks are built from OneFlow int32 ops. `benchmarks/mask_count.py` counts them at
each mask site's real position on rank 0 (the attention probabilities' word index past 2^32): making the attention
mask takes {probs["passes"]} passes and {probs["bytes"][False]:.0f} bytes per element ({graph["passes"]} and {graph["bytes"][False]:.0f} in a graph), applying it
{probs["apply"]["forward bytes"][False]:.0f} bytes forward and {probs["apply"]["backward bytes"][False]:.0f} backward
(fp32), against {native_forward:.0f} and {native_backward_bytes(False)} for OneFlow's dropout. A rank computes {masks / 1e9:.0f} billion mask elements per step
(24 layers' attention probabilities split by dp and tp, two hidden-state dropouts per layer split by dp only, the
embedding's, 4 micro-batches). At {HBM_BYTES_PER_S / 1e12:.0f} TB/s (an A100's HBM), memory-bound, seconds per
step per rank:

| | fp32 | bf16 | share of a step (fp32) |
|---|---|---|---|
| int-op path, mask + apply forward and backward | {seconds["int ops", False]:.2f} | {seconds["int ops", True]:.2f} | {seconds["int ops", False] / step_s:.0%} |
| the same in `nn.Graph` | {seconds["graph", False]:.2f} | {seconds["graph", True]:.2f} | {seconds["graph", False] / step_s:.0%} |
| the keyed-dropout op, forward and backward | {seconds["keyed op", False]:.2f} | {seconds["keyed op", True]:.2f} | {seconds["keyed op", False] / step_s:.0%} |
| `flow._C.dropout` forward and backward | {seconds["native", False]:.2f} | {seconds["native", True]:.2f} | {seconds["native", False] / step_s:.0%} |

A step is {step_s:.1f} s here: 6 flops per parameter and token over 1,024 GPUs at half of an A100's 312 dense
TFLOPS. Eager GPU ranks cut masks into chunks of {chunk_words('cuda') / 1e6:.0f} million words (at most
{GPU_LAUNCH_BYTES / 2 ** 30:.0f} GiB of temporaries a launch): {sites["attention-probs dropout"]["chunks"]} per attention use,
{launches:,} eager ops per rank per step (counted), tens of microseconds each, where the op is not built.
The op's CUDA kernels compile here (CUDA 13, compile only) and have not run on a GPU: OneFlow 0.9.0 is a CUDA 11.7
build and no host here has one. Eager CPU ranks run the host loop of `random/_counter_kernel.c` (the same
per-element function, `random/keyed_op/counter_hash.h`) and apply the mask in a second pass.

## Checkpoints: random state and data position

Measured here (pickled as the checkpoints store them): one rank's random state (python's, numpy's and
OneFlow's CPU generator, and the layout) is {rng_bytes:,} bytes; the data position of the global-order
sampler is {position_bytes:,} bytes (rank 0's is the one read on resume). At {world:,} ranks: {rng_bytes * world / 2 ** 20:.1f} MiB
of random state in total, one file per rank, beside about 2.1 TB of weights and optimizer state (175B
parameters, float32 weights and two Adam moments). A GPU rank also saves its CUDA generators' state, whose size
OneFlow sets from the GPU (its random state is sized by the number of multiprocessors): not measured here, no GPU.

## Start-up at 1,024 ranks

What libai_ext adds to a rank's start-up grows with the parameters *that rank* holds, never with the whole
model, and with the number of ranks only through collectives of a few integers:

- **The initial-weight re-draw** above: each rank its own shards, in parallel with every other rank. While the
  model is built, the recorder of `random/init_recipes.py` keeps a copy of every drawn tensor to check its replay,
  so the build's peak is about twice the rank's randomly initialised shards ({2 * params * 4 / 2 ** 30:.0f} GiB of float32
  at {params / 1e9:.2f} billion parameters), plus the float64 temporaries of the largest shard being re-drawn.
- **A second build** only for a model whose build discards a random draw (LiBai main's `RobertaEmbeddings`; GPT,
  BERT, T5, ViT and Swin discard none): `param_init.untracked_reach`, called with `rebuild=` from
  `engine/model_work.py` (`_build_with_seeded_init`), builds the model again on every rank with other seeds to tell
  a discarded draw from one that reached the model untracked, holding both builds' shards at once. It is bounded:
  above `train.init_rebuild_limit_gib` (default {DEFAULT_REBUILD_LIMIT_GIB}) GiB of parameters and buffers on any rank the second
  build is not made and the discarded draws are refused with an error naming each parameter ([config-keys.md](config-keys.md));
  a GPT-3 stage-0 rank at (32, 8, 4) holds {params * 4 / 2 ** 30:.0f} GiB, so such a model would be refused there unless
  the limit is raised.
- **No gather of a whole parameter.** The checks of `random/param_init.py` compare each rank's own shards and sum
  one integer per re-drawn tensor over the ranks (`_sum_over_ranks`); the agreement flags of
  `lifetime/agreement.py` gather one integer per rank ({world:,} at this layout).
- **Not measured here:** the wall time of a 1,024-rank start-up, which OneFlow's own start-up (process group, the
  placements of every stage) dominates on a small run; no host here launches that many ranks.

## What a GPU changes

- The masks' int32-op path runs on the GPU and is memory-bound: its share of a step above is a projection from
  the op count and HBM bandwidth. `make gpu-check`'s `mask cost` row measures it against `flow._C.dropout`.
- The same path computes indices past 2^32 with CUDA's int32 kernels: `make gpu-check`'s `simulation` row runs
  `libai-ext-simulate-layout` on (4, 2, 2) with GPT-2 XL's shapes with its int32-op and global-op paths on the GPU.
- The initial-weight re-draw and the recorder's copies live in device memory: the start-up peak above is
  device memory on a GPU host.
- The checkpointed random state gains the CUDA generators' state (not measured here).

[tools.md](tools.md#gpu_check-what-only-a-gpu-runs) lists every row of `make gpu-check`; none has run on a GPU yet.
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exponent", type=int, default=22, help="elements of the measured draws: 2**EXPONENT")
    parser.add_argument("--out", help="write the page here (docs/scale.md)")
    args = parser.parse_args()
    text = page(args.exponent)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
