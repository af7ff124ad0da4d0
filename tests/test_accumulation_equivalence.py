"""Gradient accumulation follows the trajectory of 1 rank with the whole global batch.

Draws are keyed by (global step, global sample position): a step's samples sit at the same
positions whether they arrive in one batch, split over data-parallel ranks, or in micro-batches
(eager: one per iteration; graph: split by OneFlow), so dropout, drop-path, the crop of each
sample and the global mixup are the same.  Eager accumulation also steps the learning rate per
optimizer step (``engine/step_schedule.py``).  ``tools/check_equivalence.py`` on
configs/demo_swin_digits_cpu.py (dropout 0.1, attention dropout 0.1, drop-path 0.2, random crop,
mixup/cutmix, label smoothing, its warmup-cosine schedule) over 64 training samples, so that the
4 steps of global batch 32 cross an epoch boundary twice; every rank its own python/numpy/OneFlow
streams (``train.seed_scope=rank``).  Data-parallel layouts within 1e-4, the others within 1e-5.
Quick tier: acc2, dp2 x acc2 and dp2 x acc2 in graph mode; the long tier adds pp2 x acc2 to the same tool run
(one 1-rank reference), and stock LiBai's dp2 x acc2.  (dp2 alone is every layout test's; acc4 and acc2 in
graph mode are the quick layouts' mechanism again.)

A loss averaged over a micro-batch's unmasked tokens (LiBai's Llama and ChatGLM) depends on which
samples share a micro-batch: the same tool run also trains tests/configs/swin_padded_tokens_cpu.py
(the demo's Swin, each sample's last-stage tokens classified, a synthetic padding of 0 to 3 of its 4
tokens), and dp2 x acc2, eager and graph, must follow 1 rank with acc2 (its micro-batches hold the same
samples on every layout); eager, iteration by iteration, as each logs one micro-batch.  Against the
whole batch ("1") such a loss averages over other groups of tokens, on 1 rank too: not compared.
"""
import os

import pytest

from conftest import ROOT, check_equivalence, load_tool, long_tier_selected
from libai_ext.engine.raw_losses import read_raw_losses

tool = load_tool("check_equivalence")
COMMON = ["train.seed_scope=rank", "model.drop_rate=0.1", "model.attn_drop_rate=0.1", "model.drop_path_rate=0.2",
          "dataloader.train.dataset.0.max_samples=64"]
QUICK = ["acc2", "dp2xacc2", "dp2xacc2:graph"]
LONG = ["pp2xacc2"]
ITERS = 4
DEMO, PADDED = "demo_swin_digits_cpu", "swin_padded_tokens_cpu"
CONFIGS = {DEMO: os.path.join(ROOT, "configs", f"{DEMO}.py"),
           PADDED: os.path.join(ROOT, "tests", "configs", f"{PADDED}.py")}


def run(tmp_path, layouts, *overrides, configs=(DEMO,)):
    """``(status, {layout: (max relative difference, first diverging iteration)}, output, workdir)`` of one tool
    run: the demo's table (``configs`` are trained in each layout's launch)."""
    workdir = tmp_path / "runs"
    argv = ["--config-file", *(CONFIGS[c] for c in configs), "--layouts", "1", *layouts,
            "--iters", str(ITERS), "--rtol", "1e-4", "--timeout", "900", "--workdir", str(workdir),
            f"dataloader.train.dataset.0.root.root={tmp_path / 'digits'}", *COMMON, *overrides]
    status, tables, text = check_equivalence(argv, list(configs), layouts)
    rows = tables[DEMO]
    return status, {layout: (float(cells[1]), cells[2]) for layout, cells in rows.items()}, text, workdir


def tolerance(layout):
    return 1e-4 if "dp" in layout else 1e-5


@pytest.fixture(scope="module")
def plugin(request, tmp_path_factory):
    """The quick layouts, and the long tier's where it runs too: one tool run, one 1-rank reference for all."""
    return run(tmp_path_factory.mktemp("accumulation"), QUICK + (LONG if long_tier_selected(request) else []),
               configs=(DEMO, PADDED))


def test_accumulating_layouts_follow_the_whole_batch(plugin):
    status, rows, text, _ = plugin
    for layout in QUICK:
        difference, first_diverging = rows[layout]
        assert difference <= tolerance(layout) and first_diverging == "-", text  # the tool's verdict: a match


def padded_losses(workdir, layout):
    """The token-averaged config's raw loss per logged iteration (eager with acc2: one micro-batch each)."""
    records = read_raw_losses(os.path.join(workdir, layout, PADDED))
    return [record["total_loss"] for record in records]


def test_a_token_averaged_loss_sees_the_same_micro_batches_on_every_layout(plugin):
    """dp2 x acc2 against 1 rank with acc2: each eager iteration (a micro-batch), and each graph step."""
    _, _, _, workdir = plugin
    one = padded_losses(workdir, "acc2")
    assert len(one) == 2 * ITERS
    steps = [(one[2 * t] + one[2 * t + 1]) / 2 for t in range(ITERS)]  # what a graph step logs
    for layout, reference in (("dp2xacc2", one), ("dp2xacc2:graph", steps)):
        losses = padded_losses(workdir, layout)
        assert len(losses) == len(reference), (layout, losses)
        worst, first = tool.compare_losses(reference, losses, tolerance(layout))
        assert first is None, f"{layout}: iteration {first} differs from acc2 on 1 rank by {worst:.3g}"


@pytest.mark.long
def test_more_accumulating_layouts_follow_the_whole_batch(plugin):
    status, rows, text, _ = plugin
    for layout in LONG:
        assert rows[layout][0] <= tolerance(layout), text


@pytest.mark.long
def test_stock_accumulation_does_not(tmp_path):
    """Stock LiBai draws per micro-batch from each rank's own streams and steps the learning rate per
    micro-batch: its accumulating runs leave the whole batch's trajectory."""
    status, rows, text, _ = run(tmp_path, ["dp2xacc2"], "train.trainer=libai.engine.DefaultTrainer")
    assert status == tool.EXIT_DIFFER and rows["dp2xacc2"][0] > 1e-4, text
