"""The parallel layout does not change the training (configs/demo_swin_digits_cpu.py).

configs/demo_swin_digits_cpu.py from the seed alone (no shared checkpoint), real digits, random crop,
mixup/cutmix, label smoothing, dropout 0.1, attention dropout 0.1 and drop-path 0.2, the same
global batch of 32 on every layout (dp2: 16 per rank), ``train.randomness="layout_invariant"``.
Per-iteration raw loss against 1 rank (tools/check_equivalence.py):

* no data parallelism (pp4): within 1e-5 relative;
* data parallelism ((2, 2, 2)): within 1e-4 (the gradient's all-reduce adds in another order).

The layouts of one or two axes (pp2, tp2, dp2, dp2 x pp2, tp2 x pp2) are the model zoo's (tests/test_zoo_equivalence.py,
LiBai's Swin among its models); here are four stages, and all three axes at once with every rank's own streams.

``train.seed_scope=rank`` gives every rank its own python/numpy/OneFlow stream: nothing the
training draws may depend on them.  The 50-iteration figures are in docs/benchmarks.md (Equivalence).
tests/test_check_equivalence.py shows stock LiBai failing the same comparison.
"""
import os

import pytest

pytestmark = pytest.mark.long  # the quick tier: tests/test_zoo_equivalence.py and test_accumulation_equivalence.py

from conftest import ROOT, check_equivalence, load_tool

ITERS = 3
EXACT_RTOL, DATA_PARALLEL_RTOL = 1e-5, 1e-4
WITHOUT_DP = ["pp4"]
WITH_DP = ["dp2xtp2xpp2"]
tool = load_tool("check_equivalence")
STOCHASTIC = ["model.drop_rate=0.1", "model.attn_drop_rate=0.1", "model.drop_path_rate=0.2"]


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """``{layout: (max relative difference, first iteration above 1e-4)}`` from one tool run."""
    work = tmp_path_factory.mktemp("layouts")
    argv = ["--config-file", os.path.join(ROOT, "configs", "demo_swin_digits_cpu.py"),
            "--layouts", "1", *WITHOUT_DP, *WITH_DP, "--iters", str(ITERS), "--rtol", str(DATA_PARALLEL_RTOL),
            "--timeout", "600", "--workdir", str(work / "runs"), "train.seed_scope=rank",
            f"dataloader.train.dataset.0.root.root={work / 'digits'}", *STOCHASTIC]
    status, tables, text = check_equivalence(argv, ["demo_swin_digits_cpu"], WITHOUT_DP + WITH_DP)
    return status, {layout: (float(cells[1]), cells[2]) for layout, cells in tables["demo_swin_digits_cpu"].items()}, text


@pytest.mark.parametrize("layout", WITHOUT_DP)
def test_model_parallel_layouts_follow_one_rank(table, layout):
    assert table[1][layout][0] <= EXACT_RTOL, table[2]


@pytest.mark.parametrize("layout", WITH_DP)
def test_data_parallel_layouts_follow_one_rank(table, layout):
    assert table[1][layout][0] <= DATA_PARALLEL_RTOL, table[2]


def test_the_tool_says_every_layout_matches(table):
    assert table[0] == 0, table[2]
