"""The mixed global batch on 1 rank (batch 32), dp2 (16 per rank) and dp2 x pp2, from one synthetic
pre-mix global batch (tests/rank_scripts/global_mixup.py): identical bit for bit in the default
"layout_invariant" mode; flowvision's local mixup ("fast" mode, stock LiBai's) differs from 1 rank."""
from argparse import Namespace

import pytest

from conftest import rank_script, records_of_every_rank
from libai_ext.random import modes
from libai_ext.testing import launch

LAYOUTS = {"dp2": (2, 1), "dp2-pp2": (2, 2)}  # (dp, pp)
RECORDS_PER_RANK = 4  # 2 modes x (a mixup step, a cutmix step)


def by_case(records):
    return {(r["mode"], r["kind"]): r for r in records}


@pytest.fixture(scope="module")
def one_rank():
    """The 1-rank run, in this process (it saves a launch)."""
    import global_mixup
    from common import setup_layout

    saved = modes.layer_seed(), modes.randomness()
    try:
        setup_layout(Namespace(dp=1, tp=1, pp=1, layers=0))
        return by_case(global_mixup.mixed_records(1))
    finally:
        modes.set_layer_seed(*saved)


@pytest.fixture(scope="module", params=[pytest.param(l, marks=pytest.mark.long) if l == "dp2" else l for l in LAYOUTS])
def layout_run(request, tmp_path_factory):
    dp, pp = LAYOUTS[request.param]
    result = launch(rank_script("global_mixup.py"), dp * pp, ["--dp", dp, "--pp", pp], timeout=300,
                    workdir=str(tmp_path_factory.mktemp(request.param)))
    by_rank = records_of_every_rank(result, count=RECORDS_PER_RANK)
    return request.param, {rank: by_case(records) for rank, records in by_rank.items()}


def stage0_records(runs, dp):
    stage0 = {rank: cases for rank, cases in runs.items() if rank < dp}  # LiBai puts stage 0 on ranks [0, dp)
    assert len(stage0) == dp and all(r["stage0"] for cases in stage0.values() for r in cases.values())
    return stage0


def test_one_rank_run_has_both_kinds(one_rank):
    assert len(one_rank) == RECORDS_PER_RANK
    assert {kind for _, kind in one_rank} == {"mixup", "cutmix"}
    assert all(r["labels_shape"] == [32, 10] for r in one_rank.values())


def test_global_mixup_is_the_same_on_every_layout(one_rank, layout_run):
    name, runs = layout_run
    dp, pp = LAYOUTS[name]
    for rank, cases in stage0_records(runs, dp).items():
        for kind in ("mixup", "cutmix"):
            got, want = cases[("layout_invariant", kind)], one_rank[("layout_invariant", kind)]
            assert got["step"] == want["step"]
            assert (got["images"], got["labels"]) == (want["images"], want["labels"]), f"{name} rank {rank} {kind}"
    assert all(not r["stage0"] for rank, cases in runs.items() if rank >= dp for r in cases.values())


def test_local_mixup_differs_from_one_rank(one_rank, layout_run):
    """The check can fail: flowvision's local batch mixup pairs within each rank's 16 samples."""
    name, runs = layout_run
    dp, _ = LAYOUTS[name]
    for rank, cases in stage0_records(runs, dp).items():
        for kind in ("mixup", "cutmix"):
            got, want = cases[("fast", kind)], one_rank[("fast", kind)]
            assert got["images"] != want["images"] and got["labels"] != want["labels"], f"{name} rank {rank} {kind}"
