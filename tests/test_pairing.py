"""Images and labels stay paired through get_batch; stock LiBai's do not where real LiBai breaks them.

Each rank holds the samples its trainer's sampler would read (rank_scripts/pairing.py), so
stock LiBai 0.1.1 is expected to break pairs exactly where it does in a real run: with mixup
(each rank mixes with its own numpy stream), and under dp x pp even without it (its samplers
use ``get_data_parallel_rank() = rank // (tp * pp)``, not the shard of the rank's placement).
At dp=1 without mixup every rank reads the same samples and stock LiBai keeps the pairs.
LiBai main (9dcbe3b) has both halves fixed (#255, and ``(rank // tp) % dp``): there stock
must keep the pairs (docs/upstream-bugs.md, sections 2 and 3).
"""
import numpy as np
import pytest

from conftest import LOADER_CHECKS, records_of_every_rank
from libai_ext.compat import libai_line, libai_main

LIBAI_MAIN = libai_line() is libai_main

LAYOUTS = [  # (dp, tp, pp); the quick tier keeps the two that hold both halves of the bug
    pytest.param((1, 1, 2), marks=pytest.mark.long),
    (2, 1, 2),
    pytest.param((1, 2, 2), marks=pytest.mark.long),
    pytest.param((1, 1, 4), marks=pytest.mark.long),
    (2, 2, 2),
]
CASES = ("stock", "fixed", "synthetic")  # rank_scripts/pairing.py: CASES, each with and without mixup


def stock_breaks_pairs(layout, mixup):
    """Where the installed stock LiBai mismatches images and labels."""
    dp, _, pp = layout
    return not LIBAI_MAIN and (mixup or (dp > 1 and pp > 1))


def paired(record, key="label_ids"):
    assert len(record["image_ids"]) == len(record[key]) > 0, "nothing to compare"
    return np.allclose(record["image_ids"], record[key], atol=1e-4)


LOADER_TRAINERS = ("stock", "fixed")  # rank_scripts/real_loader.py: TRAINERS
REAL_LOADER_LAYOUTS = [layout for layout, checks in LOADER_CHECKS.items() if "--real-loader" in checks]


@pytest.fixture(scope="module", params=LAYOUTS, ids=lambda l: "dp%d-tp%d-pp%d" % l)
def pairing_run(request, loader_launch):
    dp, tp, pp = request.param
    result = loader_launch(request.param)
    stage0 = range(dp * tp)
    by_rank = records_of_every_rank(result, stage0, count=2 * len(CASES), check="pairing")
    others = {rank: [r for r in result.records(rank) if r["check"] == "pairing"]
              for rank in range(dp * tp, result.nproc)}
    assert not any(others.values()), f"ranks outside stage 0 reported: {sorted(r for r in others if others[r])}"
    cases = {rank: {(r["trainer"], r["mixup"]): r for r in records} for rank, records in by_rank.items()}
    return request.param, cases


@pytest.mark.parametrize("name", ["fixed", "synthetic"],
                         ids=["loader-batches", "synthetic-rank-dependent-batches"])
@pytest.mark.parametrize("mixup", [False, True], ids=["plain", "mixup"])
def test_consistent_batch_trainer_keeps_pairs(pairing_run, mixup, name):
    """``synthetic``: every rank holds other samples (not LiBai's batches); fields still come from stage 0."""
    (dp, tp, pp), cases = pairing_run
    record = cases[0][(name, mixup)]
    assert paired(record), f"images {record['image_ids']} vs labels {record['label_ids']}"
    if pp == 4:
        assert np.allclose(record["aux_ids"], cases[0][(name, False)]["image_ids"])
    assert record["fields_left_local"], "get_batch altered the caller's DistTensorData"
    assert "ranks=[0" in record["placements"]["images"] or "[[0" in record["placements"]["images"]


@pytest.mark.parametrize("mixup", [False, True], ids=["plain", "mixup"])
def test_stock_trainer_mismatches_where_real_libai_does(pairing_run, mixup):
    layout, cases = pairing_run
    record = cases[0][("stock", mixup)]
    if stock_breaks_pairs(layout, mixup):
        assert not paired(record), "stock LiBai unexpectedly kept the pairs: the test cannot see the bug"
    else:  # 0.1.1 at dp=1 without mixup (every rank read the same samples), or LiBai main
        assert paired(record), "stock LiBai broke pairs where real LiBai keeps them: the batch is not LiBai's"


def test_fixed_global_batch_holds_distinct_samples(pairing_run):
    """Each data-parallel shard of the fixed trainer's global batch is other samples (4 * dp rows per shard)."""
    (dp, tp, pp), cases = pairing_run
    ids = cases[0][("fixed", False)]["image_ids"]
    assert len(ids) == 4 * dp * dp
    assert len(set(ids)) == len(ids)


def test_stage0_replicas_agree(pairing_run):
    (dp, tp, pp), cases = pairing_run
    reference = cases[0]
    assert len(cases) == dp * tp and len(reference) == 2 * len(CASES)
    for rank, by_case in cases.items():
        assert set(by_case) == set(reference), f"rank {rank} reported other cases"
        for key, record in by_case.items():
            assert record["image_ids"] == reference[key]["image_ids"], f"rank {rank} sees another batch"


@pytest.mark.parametrize("layout", REAL_LOADER_LAYOUTS, ids=lambda l: "dp%d-tp%d-pp%d" % l)
def test_real_loader_batches_are_distinct_and_paired(loader_launch, layout):
    """LiBai's own sampler and loader on real data, no augmentation at all (in the pairing cases' launch)."""
    dp, tp, pp = layout
    by_rank = records_of_every_rank(loader_launch(layout), range(dp * tp), count=len(LOADER_TRAINERS),
                                    check="real_loader")
    for rank, records in by_rank.items():
        by_trainer = {r["trainer"]: r for r in records}
        assert sorted(by_trainer) == sorted(LOADER_TRAINERS), f"rank {rank}"
        fixed, stock = by_trainer["fixed"], by_trainer["stock"]
        assert fixed["distinct_samples"] == fixed["batch"] == 8 * dp, f"rank {rank}"
        assert fixed["labels_match"], f"rank {rank}"
        if LIBAI_MAIN:  # its samplers read the placement's shard
            assert stock["distinct_samples"] == stock["batch"] and stock["labels_match"], f"rank {rank}"
        else:  # LiBai 0.1.1: two stage-0 shards read the same samples, labels come from others.
            assert stock["distinct_samples"] < stock["batch"], f"rank {rank}"
            assert not stock["labels_match"], f"rank {rank}"
