"""``libai-ext-gpu-check`` (``tools/gpu_check.py``, ``make gpu-check``): check libai_ext on this machine's GPUs.

One table row per check (``CHECKS``).  It runs the repository's demo config and rank scripts of its test suite, so
it needs a checkout of libai_ext (the one this package was installed from, or ``--repo``).
"""
import os
import sys
import tempfile
import textwrap
import time

from .common import ToolParser, checkout_root, epilog, module_target, rank_environ

TOTAL_BUDGET_S = 900  # the whole check stops after this, start-up included
LAUNCH_TIMEOUT = 240  # one job; a GPU job of these takes well under a minute
RESUME_K = 4
# The cost targets (docs/benchmarks.md), checked on GPUs; on CPU ranks the rows run their code paths
# on small sizes and report the ratios.
MASK_TIME_TARGET, MASK_PEAK_TARGET, MASK_HELD_TARGET, STEP_TARGET = 1.5, 1.25, 1.01, 1.05  # held: 1 % rounding
MASK_DTYPES = ("float32", "float16", "bfloat16")
COST_SIZES = {"cuda": dict(mask_log2=24, step_iters=30, step_warmup=10, step_repeats=2),
              "cpu": dict(mask_log2=16, step_iters=5, step_warmup=2, step_repeats=1)}

# Every check, in the order it runs: (row name, GPUs it needs at least, what passes). The help, the run
# plan and docs/tools.md's table (tests/test_docs.py) all read this one table.
CHECKS = (
    ("masks", 1, "`libai_ext.random.layers` masks (the keyed values, `Dropout`, `DropPath`) drawn on CUDA "
                 "equal the CPU ones bit for bit"),
    ("keyed op", 1, "the keyed-dropout op's CUDA kernels, built here first (`python -m "
                    "libai_ext.random.keyed_op.build --cuda`): eager and in a train graph's `Dropout`, its output on "
                    "CUDA equals its CPU kernel's bit for bit; one call within "
                    f"{MASK_TIME_TARGET}x the time of OneFlow's dropout"),
    ("simulation", 1, "`libai-ext-simulate-layout` on (4, 2, 2) with GPT-2 XL's shapes, its int32-op and "
                      "global-op paths on CUDA: every simulated rank's masks and values equal the 1-rank draw, "
                      "indices past 2**32 included"),
    ("mask cost", 1, "the layout-invariant mask from OneFlow int32 ops (where the keyed-dropout op is not built) against "
                     "OneFlow's own dropout (`flow._C.dropout`) on a "
                     f"2**{COST_SIZES['cuda']['mask_log2']}-element tensor in "
                     f"{', '.join(MASK_DTYPES)}: within {MASK_TIME_TARGET}x the time and {MASK_PEAK_TARGET}x "
                     "the peak memory of a call, the memory held for backward within 1 %, the kept values "
                     "bit for bit"),
    ("graph step", 1, "LiBai's GPT-2 (`configs/libai_gpt2_cpu.py`) in graph mode, `ConsistentBatchTrainer` "
                      "against LiBai's `DefaultTrainer` with the same graph, "
                      f"{COST_SIZES['cuda']['step_repeats']} interleaved runs each: within "
                      f"{STEP_TARGET}x stock's median step (its text data need LiBai's source: "
                      "`$LIBAI_MAIN_ARCHIVE`)"),
    ("resume", 1, f"`configs/demo_pipeline_cpu.py` trains on 1 CUDA rank; a run stopped after iteration "
                  f"{RESUME_K - 1} and resumed repeats the uninterrupted run's raw per-iteration losses exactly"),
    ("generators", 1, "on each rank (1, or 2 where there are 2 GPUs): seeding, random-state capture and "
                      "restore, keyed augmentation and \"fast\" dropout touch only the rank's own GPU; "
                      "\"fast\" dropout creates one generator per (device, stream); a random draw on the GPU "
                      "inside keyed augmentation is refused"),
    ("pairing", 2, "pp2 (a 2-stage pipeline) `get_batch`: `ConsistentBatchTrainer` keeps images and mixed-up "
                   "labels paired; stock `DefaultTrainer` pairs as its LiBai line does (0.1.1 breaks the "
                   "mixed-up pairs, main keeps them)"),
    ("guard", 2, "`train.batch_check` stops every rank of a stock LiBai 0.1.1 run with rank-dependent "
                 "augmentation (passes stock main, whose fields all come from stage 0) and passes "
                 "`ConsistentBatchTrainer`'s batches"),
)


def checks_help():
    lines = []
    for gpus in sorted({gpus for _, gpus, _ in CHECKS}):
        lines.append("on 1 GPU:" if gpus == 1 else f"on {gpus} GPUs or more, also:")
        for name, needed, what in CHECKS:
            if needed == gpus:
                lines.append(textwrap.fill(f"{name}: {what.replace('`', '')}", width=100,
                                           initial_indent="  ", subsequent_indent="      "))
    return "\n".join(lines)


DESCRIPTION = f"""\
Check libai_ext on this machine's GPUs.  Every launched job has a hard timeout of {LAUNCH_TIMEOUT} s,
and the whole check stops after {TOTAL_BUDGET_S // 60} minutes.  Prints one table row per check:

{checks_help()}

It reads configs/ and tests/rank_scripts/ of a libai_ext checkout: the one this package is
installed from (an editable install or a checkout run), else the working directory, or --repo."""

NO_GPU_EXIT = 2
EXIT_CODES = (
    (0, "every check passed"),
    (1, "a check failed (its row says why; logs are kept under --workdir)"),
    (NO_GPU_EXIT, "refused, nothing run: OneFlow sees no CUDA device (with --device cuda), no checkout "
                  "was found, or bad arguments"),
)

EXAMPLES = (
    "# on a GPU host, from the checkout (same as make gpu-check)",
    "python tools/gpu_check.py",
    "",
    "# installed: point it at the checkout, keep the logs in /tmp",
    "libai-ext-gpu-check --repo ~/libai_ext --workdir /tmp/gpu-check",
    "",
    "# the same checks on CPU ranks (how the test suite exercises this tool; no cost target applies)",
    "libai-ext-gpu-check --device cpu",
)

CHECKOUT_FILES = {"demo": os.path.join("configs", "demo_pipeline_cpu.py"),
                  "pairing": os.path.join("tests", "rank_scripts", "pairing.py"),
                  "gpu_host": os.path.join("tests", "rank_scripts", "gpu_host.py"),
                  "mask_cost": os.path.join("benchmarks", "mask_cost.py"),
                  "trainer_overhead": os.path.join("benchmarks", "trainer_overhead.py")}
SIMULATED_GPUS = 8  # --device cpu: the generators check runs in a simulated 8-GPU host
TRAIN_NET = module_target("libai_ext.cli.train_net")

_checkout = [checkout_root(tuple(CHECKOUT_FILES.values()))]


def checkout_file(name):
    """A file of the libai_ext checkout the checks read (``CHECKOUT_FILES``)."""
    root = _checkout[0]
    if root is None:
        raise CheckFailed(f"no libai_ext checkout found (it needs {', '.join(CHECKOUT_FILES.values())}): "
                          "run from a checkout or pass --repo")
    return os.path.join(root, CHECKOUT_FILES[name])


def checkout_module(name):
    """A benchmark script of the checkout (``CHECKOUT_FILES``) imported as a module (its folder on the path,
    as when it runs)."""
    import importlib

    path = checkout_file(name)
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(os.path.splitext(os.path.basename(path))[0])


class CheckFailed(AssertionError):
    pass


_deadline = [float("inf")]


def job_timeout():
    """The hard timeout of the next launched job: what is left of the budget, at most LAUNCH_TIMEOUT."""
    left = _deadline[0] - time.monotonic()
    expect(left > 10, "out of time: the 10-minute budget is spent")
    return min(LAUNCH_TIMEOUT, left)


def expect(condition, message):
    if not condition:
        raise CheckFailed(message)


# --- masks ------------------------------------------------------------------------------------

def identical_bits(a, b):
    """True when two arrays have the same dtype, shape and bytes."""
    import numpy as np

    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def check_masks(device):
    """``libai_ext.random.layers`` values and masks on ``device`` equal the CPU ones bit for bit."""
    import oneflow as flow
    from libai.utils import distributed as dist
    from omegaconf import DictConfig

    from ..random.layers import DropPath, Dropout
    from ..random.counter_rng import counter_uniform, derive_keys

    dist.setup_dist_util(DictConfig({"data_parallel_size": 1, "tensor_parallel_size": 1,
                                     "pipeline_parallel_size": 1, "pipeline_num_layers": 1}))
    broadcast = [flow.sbp.broadcast]
    placements = {name: flow.placement(name, [0]) for name in ("cpu", device)}
    compared = 0
    for counter in (0, 1, 977):
        keys = derive_keys(1234, "gpu_check", counter)
        values = {name: counter_uniform((64, 96), keys, placement, broadcast).to_local().numpy()
                  for name, placement in placements.items()}
        expect(identical_bits(values["cpu"], values[device]), f"counter_uniform differs (counter {counter})")
        compared += values["cpu"].size
    # "layout_invariant" promises one mask whatever the layout, and so whatever the device; "fast"
    # uses each device's native kernel and promises nothing across devices.
    for layer_type in (Dropout, DropPath):
        outputs = {}
        for name, placement in placements.items():
            layer = layer_type(0.3, randomness="layout_invariant")
            layer.stream = "gpu_check"  # the same stream, from its first call, on both devices
            layer.train()
            x = flow.ones(32, 16, 8, placement=placement, sbp=broadcast)
            outputs[name] = layer(x).to_local().numpy()
        kept = outputs["cpu"] != 0
        expect(0 < kept.sum() < kept.size, f"{layer_type.__name__} dropped all or nothing: nothing compared")
        expect(identical_bits(outputs["cpu"], outputs[device]), f"{layer_type.__name__} masks differ")
        compared += kept.size
    return f"{compared} values and mask elements identical to CPU"


def check_keyed_op(device, workdir):
    """The keyed-dropout op on ``device`` (its CUDA kernels built first there): eager and inside a train graph's
    ``Dropout``, the CPU kernel's values bit for bit; one eager call's time against ``flow._C.dropout``."""
    import statistics

    import oneflow as flow

    from ..engine.graph import feed_step
    from ..random import counter_rng, keyed_op
    from ..random.draws import drawing_step
    from ..random.keyed_op import build
    from ..random.layers import Dropout, name_stochastic_layers
    from ..random.layers.stochastic import dropout_scale

    expect(keyed_op.load(), keyed_op.status()[1])
    if device == "cuda" and not keyed_op.load_cuda():
        build.build_cuda_library(log=os.path.join(workdir, "keyed_op_cuda.log"))
        expect(keyed_op.load_cuda(), "the CUDA kernels built but did not load")
    rate, keys = 0.3, counter_rng.stream_keys(1234, "gpu_check", 5, 1)
    level, scale = counter_rng.keep_level(rate), dropout_scale(rate)
    x = (flow.arange(64 * 1027, dtype=flow.float32).reshape(64, 1027) - 7) / 3
    values = {name: keyed_op.keyed_dropout(x.to(name), keys, level, scale, 1).numpy() for name in ("cpu", device)}
    expect(identical_bits(values["cpu"], values[device]), "eager: the op's values differ from its CPU kernel's")

    class Model(flow.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = flow.nn.Parameter(flow.ones(x.shape[-1]))
            self.drop = Dropout(rate, randomness="layout_invariant")

        def forward(self, x):
            return self.drop(x * self.w)

    class Train(flow.nn.Graph):
        def __init__(self, model):
            super().__init__()
            self.model = model
            self.add_optimizer(flow.optim.SGD(model.parameters(), lr=0.0))

        def build(self, x):
            y = self.model(x)
            y.sum().backward()
            return y

    def graph_output(name):  # (a step-fed graph's tensors are global)
        placement, broadcast = flow.placement(name, [0]), [flow.sbp.broadcast]
        model = Model().to_global(placement=placement, sbp=broadcast).train()
        name_stochastic_layers(model)
        graph = feed_step(Train(model))
        with drawing_step(3):
            return graph(x.to_global(placement=placement, sbp=broadcast)).to_local().numpy()

    graphs = {name: graph_output(name) for name in ("cpu", device)}
    expect(identical_bits(graphs["cpu"], graphs[device]), "graph: the op's values differ from its CPU kernel's")
    size = COST_SIZES[device]["mask_log2"]
    times, _ = checkout_module("mask_cost").time_variants([size], "float32", device, 7, ("oneflow", "keyed op"))
    ratio = statistics.median(times[size, "keyed op"]) / statistics.median(times[size, "oneflow"])
    detail = (f"{values['cpu'].size} eager and graph values identical to CPU; one call {ratio:.2f}x OneFlow's "
              f"dropout at 2^{COST_SIZES[device]['mask_log2']} elements"
              + ("" if device == "cuda" else " (CPU ranks: no target applies)"))
    expect(device != "cuda" or ratio <= MASK_TIME_TARGET, f"over {MASK_TIME_TARGET}x: {detail}")
    return detail


# --- cost against OneFlow's own dropout and stock LiBai ------------------------------------------

def check_simulation(device):
    """``libai-ext-simulate-layout`` on (4, 2, 2) with GPT-2 XL's shapes, its int32-op and global-op paths on
    ``device``: every rank's masks and values equal the 1-rank draw, indices past 2**32 included."""
    from ..testing import simulate_layout as sim

    lines, findings = sim.simulate(sim.Layout(4, 2, 2, 2), sim.MODELS["gpt2-xl"], out=lambda line: None,
                                   device=device)
    expect(lines, "no draw site was simulated")
    expect(not findings, str(findings[0]) if findings else "")
    return f"{len(lines)} draw sites on 16 simulated ranks equal the 1-rank draw"


def check_mask_cost(device):
    """The int-op mask path against ``flow._C.dropout`` on ``device``: time, peak and held memory per
    dtype OneFlow has a kernel for there, and the kept values bit for bit."""
    import statistics

    mask_cost = checkout_module("mask_cost")
    size, targets = COST_SIZES[device]["mask_log2"], device == "cuda"
    parts, failed = [], []
    for dtype in MASK_DTYPES:
        if not mask_cost.kernel_exists(dtype, device):
            parts.append(f"{dtype}: no OneFlow dropout kernel on {device}")
            continue
        same, compared = mask_cost.kept_values_agree(dtype, device)
        expect(compared > 0, f"{dtype}: no element kept by both: nothing compared")
        times, _ = mask_cost.time_variants([size], dtype, device, repeats=5)
        memory = mask_cost.memory_in_fresh_processes([size], dtype, device, 1, variants=("oneflow", "int ops"))

        def median(variant, key=None):
            if key is None:
                return statistics.median(times[(size, variant)])
            return statistics.median(r[key] for r in memory[(size, variant)])
        ratios = {what: median("int ops", key) / max(median("oneflow", key), 1e-9)
                  for what, key in (("time", None), ("peak", "peak"), ("held", "held"))}
        limits = {"time": MASK_TIME_TARGET, "peak": MASK_PEAK_TARGET, "held": MASK_HELD_TARGET}
        over = [what for what in ratios if ratios[what] > limits[what]] if targets else []
        if not same or over:
            failed.append(dtype)
        parts.append(f"{dtype}: time {ratios['time']:.2f}x, peak {ratios['peak']:.2f}x, held {ratios['held']:.2f}x, "
                     f"kept values {'equal' if same else 'DIFFER'} ({compared})" + (f", over {over}" if over else ""))
    detail = f"2^{size} elements; " + "; ".join(parts) + ("" if targets else " (CPU ranks: no target applies)")
    expect(not failed, f"{', '.join(failed)} failed: {detail}")
    return detail


def check_graph_step(device, workdir):
    """LiBai's GPT-2 in graph mode: ConsistentBatchTrainer's median step over stock's, interleaved runs."""
    import statistics

    overhead = checkout_module("trainer_overhead")
    sizes = COST_SIZES[device]
    steps = {"stock": [], "layout_invariant": []}
    for repeat in range(sizes["step_repeats"]):
        for variant in overhead.rotated(list(steps), repeat):
            timings = overhead.run("gpt2", 1, variant, sizes["step_iters"], os.path.join(workdir, f"step-{repeat}"),
                                   os.path.join(workdir, "data"), env=rank_environ(), graph=True, device=device,
                                   timeout=job_timeout())
            steps[variant].append(statistics.median(timings[0]["step_times"][sizes["step_warmup"]:]))
    ratio = statistics.median(steps["layout_invariant"]) / statistics.median(steps["stock"])
    detail = (f"plugin {statistics.median(steps['layout_invariant']):.3f} s, stock {statistics.median(steps['stock']):.3f} s"
              f" a step: {ratio:.3f}x" + ("" if device == "cuda" else " (CPU ranks: no target applies)"))
    expect(device != "cuda" or ratio <= STEP_TARGET, f"over {STEP_TARGET}x: {detail}")
    return detail


# --- multi-rank checks --------------------------------------------------------------------------

def demo_args(output, data, *overrides):
    return ["--config-file", checkout_file("demo"), f"train.output_dir={output}",
            f"dataloader.train.dataset.0.root.root={data}", f"dataloader.test.0.dataset.root.root={data}", *overrides]


def check_resume(device, workdir):
    """The demo on 1 rank of ``device``: stopped after iteration K-1, resumed, same losses as uninterrupted."""
    from ..testing import launch, raw_losses_by_run

    output, data = os.path.join(workdir, "resume"), os.path.join(workdir, "data")
    overrides = ["train.dist.pipeline_parallel_size=1", f"train.train_iter={2 * RESUME_K}",
                 f"train.checkpointer.period={RESUME_K}", f"train.evaluation.eval_period={RESUME_K}",
                 "train.evaluation.eval_iter=2", "train.test_micro_batch_size=90", "train.log_period=1"]
    launch(TRAIN_NET, 1, demo_args(output, data, *overrides), timeout=job_timeout(), device=device,
           env=rank_environ(), workdir=os.path.join(workdir, "resume-logs-0"))
    with open(os.path.join(output, "last_checkpoint"), "w") as f:
        f.write(f"model_{RESUME_K - 1:07d}")  # as if the run had been killed after that save
    launch(TRAIN_NET, 1, ["--resume", *demo_args(output, data, *overrides)], timeout=job_timeout(),
           device=device, env=rank_environ(), workdir=os.path.join(workdir, "resume-logs-1"))
    runs = raw_losses_by_run(output)
    expect(len(runs) == 2, f"expected an uninterrupted and a resumed run in losses.jsonl, found {len(runs)}")
    full, tail = runs
    expect([r["iteration"] for r in tail] == list(range(RESUME_K, 2 * RESUME_K)),
           f"resumed iterations {[r['iteration'] for r in tail]}")
    uninterrupted = {r["iteration"]: r["total_loss"] for r in full}
    different = {r["iteration"]: (uninterrupted.get(r["iteration"]), r["total_loss"])
                 for r in tail if uninterrupted.get(r["iteration"]) != r["total_loss"]}
    expect(not different, f"resumed losses differ (uninterrupted, resumed): {different}")
    return f"iterations {RESUME_K}-{2 * RESUME_K - 1}: {len(tail)} resumed losses equal bit for bit"


def check_generators(device, workdir, nproc):
    """Per rank: one generator per (device, stream), and no GPU touched but the rank's own."""
    from ..testing import launch

    args = [] if device == "cuda" else ["--simulated-gpus", SIMULATED_GPUS]
    result = launch(checkout_file("gpu_host"), nproc, args, timeout=job_timeout(), device=device,
                    workdir=os.path.join(workdir, "generators-logs"))
    for rank in range(nproc):
        record = result.record(rank)
        own, phases = record["own_device"], record["phases"]
        for phase in ("seeding", "rng_state", "keyed_streams", "fast_dropout"):
            expect(phases[phase]["devices"] == [own], f"rank {rank}: {phase} touched GPUs {phases[phase]['devices']}, "
                                                      f"its own is {own}")
        created = phases["fast_dropout"]["created"]
        expect(created == {"cpu": record["streams"], f"cuda:{own}": record["streams"]},
               f"rank {rank}: {record['dropout_calls']} fast dropout calls on {record['streams']} streams created "
               f"generators {created}")
        expect(phases["manual_seed_all"]["devices"] == list(range(record["gpus"])),
               f"rank {rank}: the recording did not see flow.cuda.manual_seed_all reach all {record['gpus']} GPUs")
        expect(record["keyed_gpu_refusal"] is not None, f"rank {rank}: a GPU draw inside keyed augmentation "
                                                        "went unnoticed")
    host = "" if device == "cuda" else f" (simulated {SIMULATED_GPUS}-GPU host)"
    return (f"{nproc} ranks{host}: each touched its own GPU only; {record['dropout_calls']} fast dropouts created "
            f"{record['streams']} generators per device; GPU draw in keyed augmentation refused")


def stock_keeps_pairs_on_pp2(mixup):
    """What stock LiBai does at dp=1 x pp2: 0.1.1 breaks pairs with mixup only (every stage reads the same
    samples); main takes every field from stage 0 (LiBai #255) and keeps them."""
    from ..compat import libai_line, libai_main

    return not mixup or libai_line() is libai_main


def check_pairing(device, workdir):
    """pp2 get_batch: the plugin keeps every pair; stock LiBai pairs as its line does (0.1.1 breaks mixup)."""
    import numpy as np

    from ..testing import launch

    result = launch(checkout_file("pairing"), 2, ["--pp", 2], timeout=job_timeout(), device=device,
                    workdir=os.path.join(workdir, "pairing-logs"))
    records = {(r["trainer"], r["mixup"]): r for r in result.records(0)}
    expected = [(trainer, mixup) for trainer in ("fixed", "stock", "synthetic") for mixup in (False, True)]
    expect(sorted(records) == expected, f"rank 0 reported {sorted(records)}, expected {expected}")
    stock_broken = 0
    for (trainer, mixup), record in sorted(records.items()):
        paired = np.allclose(record["image_ids"], record["label_ids"], atol=1e-4)
        expect(len(record["image_ids"]) > 0, f"{trainer} mixup={mixup}: an empty batch proves nothing")
        if trainer != "stock":
            expect(paired, f"ConsistentBatchTrainer broke pairs ({trainer}, mixup={mixup})")
        elif stock_keeps_pairs_on_pp2(mixup):
            expect(paired, f"stock LiBai broke pairs that real LiBai keeps (mixup={mixup}): not LiBai's batches")
        else:
            expect(not paired, f"stock LiBai kept the pairs (mixup={mixup}): the check cannot see the bug")
            stock_broken += 1
    return f"pp2: plugin paired in 4/4 cases, stock broken in {stock_broken}/2 (as its LiBai line does)"


def check_guard(device, workdir):
    """train.batch_check stops every rank of stock LiBai 0.1.1 with per-rank augmentation (LiBai main takes
    every field from stage 0, so there it passes); passes the plugin."""
    from ..compat import libai_line, libai_main
    from ..testing import launch

    def run(name, trainer):
        args = demo_args(os.path.join(workdir, name), os.path.join(workdir, "data"), f"train.trainer={trainer}",
                         "train.seed_scope=rank", "train.batch_check=every", "train.train_iter=2",
                         "train.evaluation.enabled=False", "train.stage0_only_loading=False")
        return launch(TRAIN_NET, 2, args, timeout=job_timeout(), check=False, stop_on_failure=False,
                      device=device, env=rank_environ(), workdir=os.path.join(workdir, f"{name}-logs"))

    stock = run("guard-stock", "libai.engine.DefaultTrainer")
    expect(not stock.timed_out, "the stock run hung")
    if libai_line() is libai_main:
        expect(stock.failed_ranks() == [] and "batch check passed at iteration 1" in stock.log(0),
               f"stock LiBai main should pass the guard: {stock.log(0)[-2000:]}")
        stock_verdict = "stock (LiBai main) passed"
    else:
        expect(stock.ranks_logging("BatchMismatchError") == [0, 1],
               f"ranks reporting BatchMismatchError: {stock.ranks_logging('BatchMismatchError')}, expected [0, 1]")
        stock_verdict = "stock stopped on ranks [0, 1]"
    fixed = run("guard-fixed", "libai_ext.ConsistentBatchTrainer")
    expect(not fixed.timed_out and fixed.failed_ranks() == [], f"plugin run failed: {fixed.log(0)[-2000:]}")
    expect("batch check passed at iteration 1" in fixed.log(0), "the plugin run compared no batch")
    return f"{stock_verdict}; plugin passed 2 checked iterations"


# --- driver -----------------------------------------------------------------------------------

def planned_checks(gpus):
    """``[(name, ranks, check)]`` of the rows of ``CHECKS`` that ``gpus`` devices allow, in its order."""
    generator_ranks = 2 if gpus >= 2 else 1
    functions = {"masks": (1, lambda device, workdir: check_masks(device)), "keyed op": (1, check_keyed_op),
                 "simulation": (1, lambda device, workdir: check_simulation(device)),
                 "mask cost": (1, lambda device, workdir: check_mask_cost(device)),
                 "graph step": (1, check_graph_step), "resume": (1, check_resume),
                 "generators": (generator_ranks,
                                lambda device, workdir: check_generators(device, workdir, generator_ranks)),
                 "pairing": (2, check_pairing), "guard": (2, check_guard)}
    return [(name, *functions[name]) for name, needed, _ in CHECKS if gpus >= needed]


def run_checks(device, gpus, workdir):
    """Run every check that ``gpus`` devices allow; returns rows ``(name, ranks, ok, detail, seconds)``."""
    rows = []
    _deadline[0] = time.monotonic() + TOTAL_BUDGET_S
    for name, ranks, check in planned_checks(gpus):
        start = time.monotonic()
        try:
            ok, detail = True, check(device, workdir)
        except Exception as e:  # a failed check (or a failed job) is a row of the table, not the end
            ok, detail = False, f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300]}"
        rows.append((name, ranks, ok, detail, time.monotonic() - start))
    return rows


def format_table(rows, device):
    lines = [f"| check | {device} ranks | result | detail | seconds |", "|---|---|---|---|---|"]
    lines += [f"| {name} | {ranks} | {'PASS' if ok else 'FAIL'} | {detail} | {seconds:.0f} |"
              for name, ranks, ok, detail, seconds in rows]
    return "\n".join(lines)


def visible_cuda_devices():
    import oneflow as flow

    return flow.cuda.device_count()


def build_parser():
    parser = ToolParser(description=DESCRIPTION, epilog=epilog(exit_codes=EXIT_CODES, examples=EXAMPLES))
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="where the checks run: cuda (1 GPU runs the rows that need 1 GPU, 2 or more every row) "
                             "or cpu (2 CPU ranks, every row: the code paths only) (default: %(default)s)")
    parser.add_argument("--workdir", default="output", metavar="DIR",
                        help="a fresh folder is made inside for the runs and their logs (default: %(default)s)")
    parser.add_argument("--repo", default="", metavar="DIR",
                        help="the libai_ext checkout whose configs/ and tests/rank_scripts/ the checks run "
                             "(default: the one this package is installed from, else the working directory)")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.repo:
        _checkout[0] = checkout_root(tuple(CHECKOUT_FILES.values()), start=args.repo, search_package=False)
    if _checkout[0] is None:
        print(f"gpu-check refused: no libai_ext checkout {('at ' + repr(args.repo)) if args.repo else 'found'} "
              f"(it needs {', '.join(CHECKOUT_FILES.values())}); pass --repo. Nothing was run.", file=sys.stderr)
        return NO_GPU_EXIT
    if args.device == "cuda":
        gpus = visible_cuda_devices()
        if gpus == 0:
            print("gpu-check refused: OneFlow sees no CUDA device (oneflow.cuda.device_count() == 0; check the "
                  "driver and CUDA_VISIBLE_DEVICES). It needs 1 GPU, or 2 for the pairing and guard checks. "
                  "Nothing was run.", file=sys.stderr)
            return NO_GPU_EXIT
    else:
        gpus = 2  # CPU ranks: every check
    os.makedirs(args.workdir, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="gpu_check-", dir=args.workdir)
    rows = run_checks(args.device, gpus, workdir)
    print(format_table(rows, args.device))
    print(f"(logs under {workdir})")
    if gpus < 2:
        print("(1 GPU: pairing and guard need 2 and were not run)")
    return 0 if rows and all(ok for _, _, ok, _, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
