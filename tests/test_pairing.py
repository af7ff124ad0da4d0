"""Images and labels stay paired through get_batch; stock LiBai's do not (the bug).

What stock LiBai does depends on the installed line: 0.1.1 has both halves of the bug.  Main
has neither: it builds every field on stage 0 (LiBai #255), and its
``get_data_parallel_rank() = (rank // model_parallel_size) % dp`` with ``model_parallel_size``
= tp (not tp * pp as in 0.1.1) is exactly the stage-0 placement's data-parallel index.
"""
import numpy as np
import pytest

from conftest import rank_script
from libai_ext.compat import libai_line, libai_main
from libai_ext.testing import launch

LIBAI_MAIN = libai_line() is libai_main

LAYOUTS = [  # (dp, tp, pp)
    (1, 1, 2),
    (2, 1, 2),
    (1, 2, 2),
    (1, 1, 4),
    (2, 2, 2),
]


def paired(record, key="label_ids"):
    return np.allclose(record["image_ids"], record[key], atol=1e-4)


@pytest.fixture(scope="module", params=LAYOUTS, ids=lambda l: "dp%d-tp%d-pp%d" % l)
def pairing_run(request):
    dp, tp, pp = request.param
    args = ["--dp", dp, "--tp", tp, "--pp", pp]
    if pp == 4:
        args.append("--aux")  # also a field at placement_idx 1
    result = launch(rank_script("pairing.py"), dp * tp * pp, args, timeout=300)
    return request.param, result


def cases(result, rank=0):
    return {(r["trainer"], r["mixup"]): r for r in result.records(rank)}


@pytest.mark.parametrize("mixup", [False, True], ids=["plain", "mixup"])
def test_consistent_batch_trainer_keeps_pairs(pairing_run, mixup):
    (dp, tp, pp), result = pairing_run
    record = cases(result)[("fixed", mixup)]
    assert paired(record), f"images {record['image_ids']} vs labels {record['label_ids']}"
    if "aux_ids" in record:
        assert np.allclose(record["aux_ids"], cases(result)[("fixed", False)]["image_ids"])
    assert record["fields_left_local"], "get_batch altered the caller's DistTensorData"
    assert "ranks=[0" in record["placements"]["images"] or "[[0" in record["placements"]["images"]


@pytest.mark.parametrize("mixup", [False, True], ids=["plain", "mixup"])
def test_stock_trainer_pairs_as_its_line_does(pairing_run, mixup):
    (dp, tp, pp), result = pairing_run
    record = cases(result)[("stock", mixup)]
    if LIBAI_MAIN:  # every field from stage 0 since LiBai #255: also at dp=1 pp2 with mixup
        assert paired(record), f"stock LiBai main broke the pairs: {record['image_ids']} vs {record['label_ids']}"
    else:
        assert not paired(record), "stock LiBai unexpectedly kept the pairs: the test cannot see the bug"


def test_stage0_replicas_agree(pairing_run):
    (dp, tp, pp), result = pairing_run
    stage0_ranks = range(dp * tp)
    reference = cases(result, 0)
    for rank in stage0_ranks:
        for key, record in cases(result, rank).items():
            assert record["image_ids"] == reference[key]["image_ids"], f"rank {rank} sees another batch"


@pytest.mark.parametrize("layout", [(2, 1, 2), (2, 2, 2)], ids=["dp2-tp1-pp2", "dp2-tp2-pp2"])
def test_real_loader_batches_are_distinct_and_paired(tmp_path, layout):
    """LiBai's own sampler and loader on real data, no augmentation at all."""
    dp, tp, pp = layout
    result = launch(rank_script("real_loader.py"), dp * tp * pp,
                    ["--dp", dp, "--tp", tp, "--pp", pp, "--data", tmp_path / "digits"], timeout=300)
    by_trainer = {r["trainer"]: r for r in result.records(0)}
    fixed, stock = by_trainer["fixed"], by_trainer["stock"]
    assert fixed["distinct_samples"] == fixed["batch"] == 8 * dp
    assert fixed["labels_match"]
    if LIBAI_MAIN:  # main's sampler rank is the placement's, and labels move from stage 0
        assert stock["distinct_samples"] == stock["batch"] == 8 * dp
        assert stock["labels_match"]
    else:  # 0.1.1: two stage-0 shards read the same samples, labels come from others
        assert stock["distinct_samples"] < stock["batch"]
        assert not stock["labels_match"]
