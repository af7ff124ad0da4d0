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
Quick tier: acc2, dp2 x acc2 and acc2 in graph mode; the long tier adds dp2, acc4, dp2 x acc2 in graph
mode and pp2 x acc2 to the same tool run (one 1-rank reference), and stock LiBai's accumulation.
"""
import os

import pytest

from conftest import ROOT, check_equivalence, load_tool, long_tier_selected

tool = load_tool("check_equivalence")
COMMON = ["train.seed_scope=rank", "model.drop_rate=0.1", "model.attn_drop_rate=0.1", "model.drop_path_rate=0.2",
          "dataloader.train.dataset.0.max_samples=64"]
QUICK = ["acc2", "dp2xacc2", "acc2:graph"]
LONG = ["dp2", "acc4", "dp2xacc2:graph", "pp2xacc2"]


def run(tmp_path, layouts, *overrides):
    """``(status, {layout: (max relative difference, first diverging iteration)}, output)`` of one tool run."""
    argv = ["--config-file", os.path.join(ROOT, "configs", "demo_swin_digits_cpu.py"), "--layouts", "1", *layouts,
            "--iters", "4", "--rtol", "1e-4", "--timeout", "900", "--workdir", str(tmp_path / "runs"),
            f"dataloader.train.dataset.0.root.root={tmp_path / 'digits'}", *COMMON, *overrides]
    status, tables, text = check_equivalence(argv, ["demo_swin_digits_cpu"], layouts)
    rows = tables["demo_swin_digits_cpu"]
    return status, {layout: (float(cells[1]), cells[2]) for layout, cells in rows.items()}, text


def tolerance(layout):
    return 1e-4 if "dp" in layout else 1e-5


@pytest.fixture(scope="module")
def plugin(request, tmp_path_factory):
    """The quick layouts, and the long tier's where it runs too: one tool run, one 1-rank reference for all."""
    return run(tmp_path_factory.mktemp("accumulation"), QUICK + (LONG if long_tier_selected(request) else []))


def test_accumulating_layouts_follow_the_whole_batch(plugin):
    status, rows, text = plugin
    for layout in QUICK:
        difference, first_diverging = rows[layout]
        assert difference <= tolerance(layout) and first_diverging == "-", text  # the tool's verdict: a match


@pytest.mark.long
def test_more_accumulating_layouts_follow_the_whole_batch(plugin):
    status, rows, text = plugin
    for layout in LONG:
        assert rows[layout][0] <= tolerance(layout), text


@pytest.mark.long
def test_stock_accumulation_does_not(tmp_path):
    """Stock LiBai draws per micro-batch from each rank's own streams and steps the learning rate per
    micro-batch: its accumulating runs leave the whole batch's trajectory."""
    status, rows, text = run(tmp_path, ["acc2", "dp2xacc2"], "train.trainer=libai.engine.DefaultTrainer")
    assert status == tool.EXIT_DIFFER and min(difference for difference, _ in rows.values()) > 1e-4, text
