"""tools/check_equivalence.py flags layouts that change the training and names where they part.

Real runs of configs/demo_pipeline_cpu.py (real digits, random crop, mixup/cutmix) on 1 rank
vs other layouts, 2 iterations each, ``train.seed_scope=rank`` (each rank its own stream, as in
stock LiBai):

* stock LiBai on pp2: labels come from stage 1's mixup -> flagged at ``batch.labels``;
* stock LiBai on dp2 x pp2: other samples (LiBai's sampler buckets, per-rank augmentation) ->
  flagged at ``batch.images``;
* stock LiBai on tp2 from the seed alone: OneFlow's init of a split weight depends on the layout
  -> flagged at the first column-parallel Linear (``blocks.0.channel_mix.fc1``);
* a dropout seeded per rank (tests/configs/demo_rank_local_dropout.py) -> flagged at the
  first dropout on stage 1.

Stock's pp2, dp2 x pp2 and tp2 run in one tool run against one 1-rank reference, in the long tier; the quick
tier checks the tool's parsing and comparison.  The tool passing the plugin on the same layouts:
tests/test_zoo_equivalence.py (pp2, dp2 x pp2 and four more, LiBai's models with crop and mixup) and, with
``train.seed_scope=rank``, tests/test_layout_equivalence.py.
"""
import contextlib
import json
import io
import os
import re

import pytest

from conftest import ROOT, load_tool

ITERS = 2
STOCK = "train.trainer=libai.engine.DefaultTrainer"


tool = load_tool("check_equivalence")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return tmp_path_factory.mktemp("digits")


def check(tmp_path, data, config, layouts, *opts, rtol=1e-5):
    argv = ["--config-file", os.path.join(ROOT, config), "--layouts", *layouts, "--iters", str(ITERS),
            "--rtol", str(rtol),
            "--timeout", "400", "--workdir", str(tmp_path), "train.seed_scope=rank",
            f"dataloader.train.dataset.0.root.root={data}", *opts]
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        status = tool.main(argv)
    out = captured.getvalue()
    print(out)
    rows = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| layout")]
    assert len(rows) == len(layouts) - 1, out
    for position, layout in enumerate(layouts, 1):  # which run it is on, and how far that run got
        assert f"[{position}/{len(layouts)}] layout {layout} on " in out, out
        assert re.search(rf"\[{position}/{len(layouts)}\] layout {layout} on \d ranks?: iteration {ITERS}/{ITERS}",
                         out), out
    return status, rows, out


def stock_rows(tmp_path_factory, data, layouts):
    """One stock run of ``layouts`` against one 1-rank reference: ``{layout: table row}``."""
    layouts = ["1", *layouts]
    argv = ["--config-file", os.path.join(ROOT, "configs/demo_pipeline_cpu.py"), "--layouts", *layouts,
            "--iters", str(ITERS), "--timeout", "400", "--workdir", str(tmp_path_factory.mktemp("stock")),
            "train.seed_scope=rank", f"dataloader.train.dataset.0.root.root={data}", STOCK]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = tool.main(argv)
    rows = {line.split("|")[1].strip(): line for line in out.getvalue().splitlines()
            if line.startswith("| ") and not line.startswith("| layout")}
    assert sorted(rows) == sorted(layouts[1:]), out.getvalue()
    assert status == 1, out.getvalue()
    assert "(stock: LiBai's own DefaultTrainer, run through libai_ext's train_net" in out.getvalue()
    return rows


@pytest.fixture(scope="module")
def stock(tmp_path_factory, data):
    """pp2, dp2 x pp2 and tp2 in one tool run (one 1-rank reference for all).  Long tier: the pairing bug these
    rows name is also seen in the quick tier by tests/test_pairing.py and tests/test_batch_check.py."""
    return stock_rows(tmp_path_factory, data, ["pp2", "dp2xpp2", "tp2"])


@pytest.mark.long
def test_stock_pipeline_with_mixup_is_flagged_at_the_labels(stock):
    row = stock["pp2"]
    assert "| pp2 | 2 |" in row and "| 0 |" in row, row
    assert "iteration 0, forward: batch.labels differs" in row, row


@pytest.mark.long
def test_stock_data_x_pipeline_is_flagged_at_the_images(stock):
    row = stock["dp2xpp2"]
    assert "| dp2xpp2 | 4 |" in row and "| 0 |" in row, row
    assert "iteration 0, forward: batch.images differs" in row, row


@pytest.mark.long
def test_stock_tensor_parallel_init_is_named(stock):
    row = stock["tp2"]
    assert "| tp2 | 2 |" in row and "| 0 |" in row, row
    assert "iteration 0, forward: blocks.0.channel_mix.fc1:out differs" in row, row


@pytest.mark.long
def test_dropout_seeded_per_rank_is_named(tmp_path, data):
    """train.randomness="fast": "layout_invariant" refuses this model at build time (its forward draws
    from numpy; tests/test_libai_zoo.py shows the refusal), "fast" warns and trains it."""
    status, (row,), out = check(tmp_path, data, "tests/configs/demo_rank_local_dropout.py", ["1", "pp2"],
                                "train.randomness=fast")
    assert status == 1, out
    # Blocks 0-1 sit on stage 0 (rank 0 draws as on 1 rank); block 2 is stage 1's first dropout.
    assert "iteration 0, forward: blocks.2.drop:out differs" in row, row


@pytest.mark.parametrize("text, sizes", [("1", (1, 1, 1, 1, False)), ("pp2", (1, 1, 2, 1, False)),
                                         ("dp2xtp2xpp2", (2, 2, 2, 1, False)), ("tp4", (1, 4, 1, 1, False)),
                                         ("acc2", (1, 1, 1, 2, False)), ("dp2xacc2:graph", (2, 1, 1, 2, True)),
                                         ("1:graph", (1, 1, 1, 1, True))])
def test_layout_names(text, sizes):
    parsed = tool.parse_layout(text)
    assert (parsed["dp"], parsed["tp"], parsed["pp"], parsed["acc"], parsed["graph"]) == sizes


def test_accumulating_layouts_keep_the_global_batch_and_average_their_micro_batches(tmp_path):
    overrides = tool.layout_overrides(tool.parse_layout("dp2xacc2"), 32, 3, str(tmp_path))
    assert "train.train_micro_batch_size=8" in overrides and "train.num_accumulation_steps=2" in overrides
    with open(tmp_path / "losses.jsonl", "w") as f:
        for i, loss in enumerate([1.0, 3.0, 2.0, 4.0, 5.0, 5.0]):
            f.write(json.dumps({"iteration": i, "total_loss": loss}) + "\n")
    assert tool.read_losses(str(tmp_path), 3, micro_batches=2) == [2.0, 3.0, 5.0]


@pytest.mark.parametrize("text", ["2", "pp", "pp0", "pp2xpp2", "dp2*pp2", "mp2", "acc0", "pp2:eager", "graph"])
def test_bad_layouts_are_refused_by_name(text):
    with pytest.raises(tool.UsageError, match=re.escape(f"--layouts: {text!r}")):
        tool.parse_layout(text)


def test_loss_comparison_reports_the_first_iteration_above_tolerance():
    assert tool.compare_losses([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], 1e-5) == (0.0, None)
    worst, first = tool.compare_losses([1.0, 2.0, 4.0], [1.0, 2.1, 4.0], 1e-5)
    assert first == 1 and worst == pytest.approx(0.05)
