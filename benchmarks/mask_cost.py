"""One dropout call: the layout-invariant mask paths against OneFlow's own dropout, time and memory.

    .venv/bin/python benchmarks/mask_cost.py [--sizes 20 24] [--repeats 7] [--dtype float32]
        [--device cpu] [--stages] [--out benchmarks/results/mask_cost.md]
    .venv/bin/python benchmarks/mask_cost.py --graph --sizes 22 --repeats 25   # the mask in a train nn.Graph
    .venv/bin/python benchmarks/mask_cost.py --chunk-peak   # the peak of one large int-op chunk

On a tensor of 2**k elements (shape (2**k / 1024, 1024), p = 0.1, training, ``x.requires_grad``):

* ``oneflow``: ``flow._C.dropout`` (OneFlow's kernel: its own generator, a bool mask saved);
* ``int ops``: ``libai_ext.random.layers.Dropout`` with the mask from OneFlow int32 ops, the path graphs and
  GPUs take (on CPU tensors with the host loop switched off: the simulated GPU path);
* ``host loop``: the same layer as eager CPU ranks run it (the mask from the compiled host loop).

With ``--graph``, one step of a train ``nn.Graph`` of ``dropout(x * w).sum()``: OneFlow's dropout, libai_ext's
``Dropout`` as graphs run it (the keyed-dropout op: ``keyed op``), and the same with the op switched off
(``int ops``).

Time: one forward call from a device sync to a device sync, the variants interleaved call by call in
one process (each repeat starts one variant later), median over ``--repeats``, and its ratio to
``oneflow``.  Memory, each measurement a fresh process (interleaved over the repeats, median): *peak*
is the growth of the peak resident set during the call over the resident set before it (the input
and a warmed-up variant in place; CUDA: the growth of what OneFlow's caching allocator holds, which
keeps its peak), *held* is the resident growth per call while the outputs of as many later calls as
hold about 512 MiB stay alive: each output plus what autograd saved for backward (an allocator takes
memory in blocks of tens of MiB; peak, one call's, is that coarse below 2**22 elements).
PASS/FAIL against the targets: time <= 1.5x (on CPU read on CPU time, which a loaded host does not
inflate) and peak <= 1.25x ``oneflow``'s, held <= ``oneflow``'s (within 1 %).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# One thread per OneFlow CPU kernel, as on training ranks (libai_ext.testing.launch sets the same).
os.environ.setdefault("OMP_NUM_THREADS", "1")

from report import publish  # benchmarks/report.py (scripts run from benchmarks/)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

RATE = 0.1
VARIANTS = ("oneflow", "int ops", "host loop")
# The targets; held: OneFlow's own within 1 % (an allocator rounds what it hands out).
TIME_TARGET, PEAK_TARGET, HELD_TARGET = 1.5, 1.25, 1.01


def make_call(variant, device):
    """A function ``x -> dropout(x)`` for ``variant`` (the layer is built once: its draws advance per call); None
    where the variant does not run on ``device``.  Besides ``VARIANTS``: ``keyed op``, the keyed-dropout op
    (what graphs, and eager calls off the CPU, run where it is built)."""
    from unittest import mock

    import oneflow as flow

    from libai_ext.random.layers import Dropout
    from libai_ext.random import counter_rng, keyed_op
    from libai_ext.random.layers.stochastic import dropout_scale

    if variant == "oneflow":
        generator = flow.Generator(device=device)
        return lambda x: flow._C.dropout(x, RATE, True, False, generator)
    if variant == "keyed op":
        if not (keyed_op.load() and device in keyed_op.KERNELS):
            return None
        keys, level = counter_rng.stream_keys(1, "mask_cost", 0), counter_rng.keep_level(RATE)
        return lambda x: keyed_op.keyed_dropout(x, keys, level, dropout_scale(RATE))
    layer = Dropout(RATE, randomness="layout_invariant").train()
    if variant == "host loop":
        if device != "cpu" or counter_rng._counter_kernel is None:
            return None
        return layer
    kernel = counter_rng._counter_kernel

    def int_ops(x):  # the host loop and the keyed-dropout op switched off: the path where neither is built
        counter_rng._counter_kernel = None
        try:
            with mock.patch.object(keyed_op, "KERNELS", {}):
                return layer(x)
        finally:
            counter_rng._counter_kernel = kernel
    return int_ops


def make_input(elements, dtype, device):
    """Normal values of ``dtype`` on ``device``; made from numpy so that OneFlow allocates the input
    once and leaves no freed block behind that a call could reuse unseen."""
    import numpy as np
    import oneflow as flow

    values = np.random.default_rng(0).standard_normal((elements // 1024, 1024), dtype=np.float32)
    x = flow.tensor(values, device=device)
    return (x if dtype == "float32" else x.to(getattr(flow, dtype))).requires_grad_()


def kernel_exists(dtype, device):
    """Whether OneFlow 0.9.0 has a dropout kernel for ``dtype`` on ``device`` (CPU: float32/64 only)."""
    import oneflow as flow

    try:
        flow._C.dropout(make_input(1024, dtype, device).detach(), RATE, True, False, flow.Generator(device=device)).numpy()
        return True
    except RuntimeError:
        return False


def kept_values_agree(dtype, device, elements=2 ** 16):
    """``(bit for bit?, elements compared)``: where ``flow._C.dropout`` and the layer both keep an
    element, the same bits (the kernel's scale, rounded as the kernel rounds it for ``dtype``)."""
    import numpy as np
    import oneflow as flow

    def values(t):  # (numpy has no bfloat16: its values are exact in float32)
        return (t.to(flow.float32) if t.dtype == flow.bfloat16 else t).numpy()

    x = make_input(elements, dtype, device).detach()
    ours, theirs = values(make_call("int ops", device)(x)), values(make_call("oneflow", device)(x))
    both = (ours != 0) & (theirs != 0)
    return ours[both].tobytes() == theirs[both].tobytes() and bool(np.any(both)), int(both.sum())


def sync():
    import oneflow as flow

    flow._oneflow_internal.eager.Sync()


def time_variants(sizes, dtype, device, repeats, variants=VARIANTS):
    """``({(size, variant): [wall seconds per call]}, {...: [CPU seconds per call]})``, interleaved call
    by call; the CPU time is this process's, all threads (on a loaded host it still counts the work)."""
    times, cpu = {}, {}
    for size in sizes:
        x = make_input(2 ** size, dtype, device)
        calls = {v: make_call(v, device) for v in variants}
        calls = {v: c for v, c in calls.items() if c is not None}
        names = list(calls)
        for name in names:  # one warm-up call each
            calls[name](x)
        sync()
        for repeat in range(repeats):
            shift = repeat % len(names)
            for name in names[shift:] + names[:shift]:
                sync()
                start, start_cpu = time.perf_counter(), time.process_time()
                out = calls[name](x)
                sync()
                times.setdefault((size, name), []).append(time.perf_counter() - start)
                cpu.setdefault((size, name), []).append(time.process_time() - start_cpu)
                del out
    return times, cpu


# ---- a train graph: the mask inside nn.Graph ----------------------------------------------------

GRAPH_VARIANTS = ("oneflow", "keyed op", "int ops")


def train_graph(variant, x):
    """A train ``nn.Graph`` of ``dropout(x * w).sum()`` (SGD, lr 0, ``w`` over the last dim) on ``x``'s placement:
    OneFlow's ``nn.Dropout``, or libai_ext's keyed ``Dropout`` (the graph fed the step, as the trainer does) computed
    by the keyed-dropout op (``keyed op``) or, the op switched off while the graph compiles, by int32 ops."""
    import oneflow as flow

    from libai_ext.engine.graph import feed_step
    from libai_ext.random import keyed_op
    from libai_ext.random.layers import Dropout, name_stochastic_layers

    class Model(flow.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = flow.nn.Parameter(flow.ones(x.shape[-1], placement=x.placement, sbp=flow.sbp.broadcast))
            self.drop = (flow.nn.Dropout(RATE) if variant == "oneflow"
                         else Dropout(RATE, randomness="layout_invariant"))

        def forward(self, x):
            return self.drop(x * self.w).sum()

    class Train(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.add_optimizer(flow.optim.SGD(model.parameters(), lr=0.0))

        def build(self, x):
            loss = self.model(x)
            loss.backward()
            return loss

    model = Model().train()
    name_stochastic_layers(model)
    graph = Train() if variant == "oneflow" else feed_step(Train())
    if variant == "keyed op" and not keyed_op.load():
        raise SystemExit(f"--graph: {keyed_op.status()[1]}")
    return graph


def time_graph_steps(size, device, repeats):
    """``({variant: [wall seconds per step]}, {variant: [CPU seconds]})`` of ``train_graph``'s steps at 2**size
    elements on 1 rank, the variants interleaved step by step (each repeat starts one variant later)."""
    import contextlib
    from unittest import mock

    import oneflow as flow

    from libai_ext.random import keyed_op
    from libai_ext.random.draws import drawing_step

    x = make_input(2 ** size, "float32", device).detach().to_global(
        placement=flow.placement(device, ranks=[0]), sbp=flow.sbp.broadcast)
    graphs = {v: train_graph(v, x) for v in GRAPH_VARIANTS}
    times, cpu = {}, {}
    for repeat in range(-1, repeats):  # -1: the compile and a warm-up step each
        shift = repeat % len(GRAPH_VARIANTS)
        for name in GRAPH_VARIANTS[shift:] + GRAPH_VARIANTS[:shift]:
            sync()
            start, start_cpu = time.perf_counter(), time.process_time()
            # The route is chosen while a graph traces (its first call): "int ops" traces with the op switched off.
            off = mock.patch.object(keyed_op, "KERNELS", {}) if name == "int ops" else contextlib.nullcontext()
            with drawing_step(repeat + 1), off:
                graphs[name](x).to_local().numpy()
            if repeat >= 0:
                times.setdefault(name, []).append(time.perf_counter() - start)
                cpu.setdefault(name, []).append(time.process_time() - start_cpu)
    return times, cpu


def graph_table(size, times, cpu):
    """Median step and CPU time, and the fastest CPU time (the least disturbed on a shared host), each as a ratio
    to OneFlow's dropout."""
    stats = {name: (statistics.median(times[name]), statistics.median(cpu[name]), min(cpu[name]))
             for name in GRAPH_VARIANTS}
    lines = ["| elements | variant | step ms (median) | ratio | CPU ms (median) | ratio | CPU ms (fastest) | ratio |",
             "|---|---|---|---|---|---|---|---|"]
    for name, values in stats.items():
        cells = " | ".join(f"{v * 1e3:.1f} | {v / base:.2f}" for v, base in zip(values, stats["oneflow"]))
        lines.append(f"| 2^{size} | {name} | {cells} |")
    return "\n".join(lines)


# ---- memory: one measurement per process ------------------------------------------------------

def _status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident set


CHUNK_PEAK_BOXES = {"below 2**32 words": ((4096, 8192), (0, 0), (4096, 8192)),
                    "across a multiple of 2**32": ((2 ** 20, 2 ** 14 + 1), (262000, 0), (263024, 2 ** 14 + 1))}


def chunk_peak(shape, lo, hi):
    """Bytes per word that one int-op chunk (the mask box ``[lo, hi)`` of ``shape``, the host loop off, the chunk
    limit lifted) adds to the peak resident set, its 2-byte output included: what
    ``counter_rng.CHUNK_BYTES_PER_WORD`` states."""
    from unittest import mock

    import numpy as np
    from libai_ext.random import counter_rng

    keys = counter_rng.derive_keys(1, "chunk peak")
    words = int(np.prod(np.subtract(hi[:-1], lo[:-1]))) * ((hi[-1] - lo[-1] + 1) // 2)
    with mock.patch.object(counter_rng, "_counter_kernel", None), \
            mock.patch.dict(counter_rng.CHUNK_WORDS, {"cpu": 2 ** 40}):
        counter_rng.local_keep_mask(shape, lo, [a + 1 for a in lo], keys, RATE).numpy()  # warm-up
        _reset_peak()
        before = _status_kib("VmRSS")
        counter_rng.local_keep_mask(shape, lo, hi, keys, RATE).numpy()
        return (_status_kib("VmHWM") - before) * 1024 / words


def _exhaust_cached_memory(used, block_mib=1):
    """Take the memory OneFlow's allocator keeps for reuse (resident, but free) with 1 MiB tensors until
    new ones grow the resident set: what a call then allocates shows in it.  Returns the tensors."""
    import oneflow as flow

    ballast, growing = [], 0
    while growing < 3 and len(ballast) < 4096:
        before = used()
        ballast.append(flow.ones(block_mib * 2 ** 18, dtype=flow.float32))
        sync()
        growing = growing + 1 if used() - before >= 0.9 * block_mib else 0
    return ballast


def measure_memory(variant, size, dtype, device):
    """``{"peak": MiB, "held": MiB}`` of a call, in this (fresh) process: *peak* the growth during the
    first call; *held* what each later call adds while the outputs (and autograd's saved tensors) stay
    alive, so blocks freed inside a call and kept by an allocator count once, in the peak."""
    import oneflow as flow

    call = make_call(variant, device)
    if call is None:
        return None
    call(make_input(2 ** 12, dtype, device))  # kernels loaded, the layer's first draw done
    x = make_input(2 ** size, dtype, device)
    sync()
    if device == "cpu":
        def used():
            return _status_kib("VmRSS") / 1024
        ballast = _exhaust_cached_memory(used)  # kept alive until the end
        _reset_peak()
    else:
        used = flow._oneflow_internal.GetCUDAMemoryUsed  # MiB the device has in use; OneFlow's caching
        flow.cuda.empty_cache()                          # allocator keeps the blocks a call reached
        ballast = None
    before = used()
    outputs = [call(x)]
    sync()
    peak = (_status_kib("VmHWM") / 1024 if device == "cpu" else used()) - before
    after_one = used()  # the allocator now keeps the blocks a call's temporaries take
    calls = held_calls(size, dtype)
    for _ in range(calls):  # one at a time: queued calls would hold their temporaries at once
        outputs.append(call(x))
        sync()
    held = (used() - after_one) / calls
    del outputs, ballast
    return {"peak": peak, "held": held}


def held_calls(size, dtype, resolution_mib=512):
    """Calls whose outputs are kept alive to measure *held*: enough that together they hold about
    ``resolution_mib`` (an allocator takes memory in blocks of tens of MiB), at least 4."""
    import numpy as np

    itemsize = {"bfloat16": 2}.get(dtype) or np.dtype(dtype).itemsize
    per_call_mib = 2 ** size * (itemsize + 1) / 2 ** 20  # the output and a 1-byte mask
    return max(4, int(np.ceil(resolution_mib / per_call_mib)))


def memory_in_fresh_processes(sizes, dtype, device, repeats, variants=VARIANTS):
    results = {}
    for size in sizes:
        for repeat in range(repeats):
            shift = repeat % len(variants)
            for variant in variants[shift:] + variants[:shift]:
                command = [sys.executable, os.path.abspath(__file__), "--child", variant, "--sizes", str(size),
                           "--dtype", dtype, "--device", device]
                done = subprocess.run(command, capture_output=True, text=True, timeout=600)
                if done.returncode:
                    raise RuntimeError(f"{variant} at 2**{size}: {done.stderr[-2000:]}")
                record = json.loads(done.stdout.strip().splitlines()[-1])
                if record is not None:
                    results.setdefault((size, variant), []).append(record)
    return results


# ---- the report ----------------------------------------------------------------------------------

def verdict(ok):
    return "PASS" if ok else "FAIL"


def table(sizes, times, cpu, memory, device="cpu"):
    """The markdown table and its rows; the time target is read on CPU time on CPU (this process's work,
    what a loaded host does not inflate), on wall time on a GPU."""
    timed = "CPU" if device == "cpu" else "time"
    lines = [f"| elements | path | time ms | time / oneflow | CPU ms | CPU / oneflow | peak MiB | peak / oneflow "
             f"| held MiB | held / oneflow | targets ({timed} <= {TIME_TARGET}x, peak <= {PEAK_TARGET}x, "
             f"held <= {HELD_TARGET}x) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    rows = []
    for size in sizes:
        ref_time = statistics.median(times[(size, "oneflow")])
        ref_cpu = statistics.median(cpu[(size, "oneflow")])
        ref_peak = statistics.median(r["peak"] for r in memory[(size, "oneflow")])
        ref_held = statistics.median(r["held"] for r in memory[(size, "oneflow")])
        for variant in VARIANTS:
            if (size, variant) not in times:
                continue
            t, c = statistics.median(times[(size, variant)]), statistics.median(cpu[(size, variant)])
            peak = statistics.median(r["peak"] for r in memory[(size, variant)])
            held = statistics.median(r["held"] for r in memory[(size, variant)])
            time_ratio = c / ref_cpu if device == "cpu" else t / ref_time
            ok = (time_ratio <= TIME_TARGET, peak / ref_peak <= PEAK_TARGET, held / ref_held <= HELD_TARGET)
            target = "-" if variant == "oneflow" else " ".join(verdict(v) for v in ok)
            lines.append(f"| 2^{size} | {variant} | {1e3 * t:.1f} | {t / ref_time:.2f} | {1e3 * c:.1f} "
                         f"| {c / ref_cpu:.2f} | {peak:.1f} "
                         f"| {peak / ref_peak:.2f} | {held:.1f} | {held / ref_held:.2f} | {target} |")
            rows.append({"size": size, "variant": variant, "time_ratio": time_ratio, "peak_ratio": peak / ref_peak,
                         "held_ratio": held / ref_held, "ok": all(ok)})
    return "\n".join(lines), rows


# ---- where the int-op path's time goes: its stages, one chunk at a time ----------------------------

# (stage, int32 ops, bytes read + written per mask element): the construction of counter_rng's int-op
# path, two mask elements a 32-bit word; OneFlow's dropout kernel reads x and writes y and its mask once.
STAGES = (
    ("index: arange, * C, - a", 3, 10),
    ("3 rounds R: //, * 2**16, -", 9, 42),
    ("3 rounds Q: * 2, - d, *", 9, 42),
    ("halves: two >=, * 2**16, two copies into the mask", 5, 11),
    ("apply: bool -> dtype, * scale, x *, copy into the output", 4, 37),
)


def stage_costs(size, dtype, device, repeats=7):
    """CPU ns per mask element of each stage (one chunk of the eager int-op path, repeated over
    ``2**size`` elements), of one int32 multiply over the words, and of ``flow._C.dropout``."""
    import oneflow as flow

    from libai_ext.random.layers import stochastic
    from libai_ext.random import counter_rng, global_index

    words = min(counter_rng.chunk_words(device), 2 ** (size - 1))
    chunks = 2 ** (size - 1) // words
    keys = counter_rng.derive_keys(1, "stages")
    shape = (words // 512, 512)
    x0 = counter_rng.local_counter_bits(shape, [0, 0], list(shape), keys, device=device)
    keep = counter_rng.local_keep_mask((words // 512, 1024), [0, 0], [words // 512, 1024], keys, RATE, device)
    x = make_input(2 * words, dtype, device).detach()
    generator = flow.Generator(device=device)
    runs = {
        STAGES[0][0]: lambda: global_index.keyed_slice(shape, [0, 0], list(shape), keys, device)[0],
        STAGES[1][0]: lambda: [counter_rng.rotate_trunc(x0) for _ in range(3)],
        STAGES[2][0]: lambda: [counter_rng.quadratic(x0, d) for d in keys[2:]],
        STAGES[3][0]: lambda: counter_rng._keep_halves(x0, 6554, (0, 512), (0, 512), 0),
        STAGES[4][0]: lambda: stochastic._masked(x, keep, 1.25),
        "one int32 multiply over the words (the unit)": lambda: x0 * 3,
        "flow._C.dropout": lambda: flow._C.dropout(x, RATE, True, False, generator),
    }
    costs = {}
    for _ in range(repeats):
        for name, run in runs.items():
            sync()
            start = time.process_time()
            for _ in range(chunks):
                run()
            sync()
            costs.setdefault(name, []).append((time.process_time() - start) / (2 * words * chunks) * 1e9)
    return {name: statistics.median(values) for name, values in costs.items()}


def stages_table(costs):
    unit = costs["one int32 multiply over the words (the unit)"]
    lines = ["| stage | int32 ops | bytes per element | CPU ns per element | units |", "|---|---|---|---|---|"]
    for name, ops, moved in STAGES:
        lines.append(f"| {name} | {ops} | {moved} | {costs[name]:.2f} | {costs[name] / unit:.1f} |")
    total = sum(costs[name] for name, _, _ in STAGES)
    lines.append(f"| int-op path, all stages | {sum(o for _, o, _ in STAGES)} | {sum(m for _, _, m in STAGES)} "
                 f"| {total:.2f} | {total / unit:.1f} |")
    lines.append(f"| `flow._C.dropout` | 1 | 9 | {costs['flow._C.dropout']:.2f} | {costs['flow._C.dropout'] / unit:.1f} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[20, 24], help="log2 of the element counts")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64", "float16", "bfloat16"))
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--out", default=None)
    parser.add_argument("--stages", action="store_true",
                        help="also: the int-op path's stages, CPU ns per element each (where its time goes)")
    parser.add_argument("--graph", action="store_true",
                        help="instead: one train step of an nn.Graph of dropout(x * w).sum(), float32, 1 rank")
    parser.add_argument("--chunk-peak", nargs="?", const="all", default=None,
                        help="instead: the peak bytes per word of one large int-op chunk (CHUNK_BYTES_PER_WORD)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)  # one memory measurement
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure_memory(args.child, args.sizes[0], args.dtype, args.device)))
        return 0
    if args.chunk_peak in CHUNK_PEAK_BOXES:  # one box per process: OneFlow's allocator keeps what it freed
        print(f"one int-op chunk, {args.chunk_peak}: {chunk_peak(*CHUNK_PEAK_BOXES[args.chunk_peak]):.1f} bytes per "
              "word of peak growth", flush=True)
        return 0
    if args.chunk_peak:
        for name in CHUNK_PEAK_BOXES:
            subprocess.run([sys.executable, __file__, "--chunk-peak", name], check=True)
        return 0
    if args.graph:
        text = "\n\n".join(graph_table(size, *time_graph_steps(size, args.device, args.repeats)) for size in args.sizes)
        publish(f"{args.device}, float32, p = {RATE}: one train step of an nn.Graph of dropout(x * w).sum() on 1 rank, "
                f"median of {args.repeats} steps interleaved with the other variants'.\n\n{text}\n", args.out,
                title=f"Dropout masks in a train graph: the keyed mask against OneFlow's dropout, {args.device}")
        return 0
    times, cpu = time_variants(args.sizes, args.dtype, args.device, args.repeats)
    memory = memory_in_fresh_processes(args.sizes, args.dtype, args.device, max(3, args.repeats // 2))
    text, _ = table(args.sizes, times, cpu, memory, args.device)
    setting = (f"{args.device}, {args.dtype}, p = {RATE}, forward with `x.requires_grad`; time: median of "
               f"{args.repeats} interleaved calls; memory: median of {max(3, args.repeats // 2)} fresh processes per "
               "variant.\n")
    if args.stages:
        size = args.sizes[-1]
        text += (f"\n\nThe int-op path's stages at 2^{size} elements, one chunk of "
                 f"{min(2 ** (size - 1), _chunk_words(args.device))} words at a time (CPU time of this process; a "
                 "unit is one int32 multiply over the words):\n\n" + stages_table(stage_costs(size, args.dtype,
                                                                                         args.device)))
    publish(setting + "\n" + text + "\n", args.out,
            title=f"Dropout masks: the keyed mask against flow._C.dropout, {args.device}, {args.dtype}")
    return 0


def _chunk_words(device):
    from libai_ext.random import counter_rng

    return counter_rng.chunk_words(device)


if __name__ == "__main__":
    sys.exit(main())
