"""dp2 with 16 samples per rank reads the same global batches as 1 rank with 32 (issue 11).

LiBai's real image loader over the digits (the first 100: an epoch is 3 global batches of 32),
built by each trainer, no mixup, augmentation drawing from python, numpy and OneFlow
(rank_scripts/global_order.py).  Under ``train.randomness="layout_invariant"`` the global batch
of every step holds the same samples, augmented identically, on 1 rank, dp2 and dp2 x pp2, and
a run resumed from ``consumed_samples`` (mid-epoch, and at an epoch's last batch) continues
with the uninterrupted run's batches.  Stock LiBai and the "fast" mode read other samples
(each data-parallel rank its own bucket of the dataset), and the global-order sampler without
keyed augmentation reads the right samples but augments them differently.
"""
import pytest

from conftest import records_of_every_rank, rank_script
from libai_ext.testing import launch

LAYOUTS = {"1": (1, []), "dp2": (2, ["--dp", 2]), "dp2xpp2": (4, ["--dp", 2, "--pp", 2])}
STAGE0_RANKS = {"1": [0], "dp2": [0, 1], "dp2xpp2": [0, 1]}
# rank_scripts/global_order.py: variant -> the steps (of the uninterrupted run) it records.
VARIANT_STEPS = {"layout_invariant": [0, 1, 2, 3, 4], "fast": [0, 1], "stock": [0, 1], "unkeyed": [0, 1],
                 "resume_mid": [1, 2], "resume_epoch": [2, 3]}
EPOCH_STEPS, GLOBAL_BATCH, DIGITS = 3, 32, 100


@pytest.fixture(scope="module")
def batches(tmp_path_factory):
    """{layout: {(variant, step): record}} as rank 0 saw them, after checking every rank's reports."""
    data = tmp_path_factory.mktemp("digits")
    recorded = sum(len(steps) for steps in VARIANT_STEPS.values())
    out = {}
    for layout, (nproc, args) in LAYOUTS.items():
        result = launch(rank_script("global_order.py"), nproc, [*args, "--data", data], timeout=300)
        stage0 = STAGE0_RANKS[layout]
        by_rank = records_of_every_rank(result, stage0, count=recorded + 1)
        for rank in range(nproc):
            summary = result.records(rank)[-1]
            assert summary["variant"] == "summary" and summary["stage0"] == (rank in stage0), f"{layout} rank {rank}"
            assert summary["joined"] == {v: len(s) for v, s in VARIANT_STEPS.items()}, f"{layout} rank {rank}"
        replicas = [records[:-1] for records in by_rank.values()]
        assert all(r == replicas[0] for r in replicas), f"{layout}: stage-0 ranks saw different global batches"
        out[layout] = {(r["variant"], r["step"]): r for r in replicas[0]}
        assert sorted(out[layout]) == sorted((v, s) for v, steps in VARIANT_STEPS.items() for s in steps), layout
    return out


def same_images(a, b):
    return sum(x == y for x, y in zip(a["images"], b["images"]))


@pytest.mark.parametrize("layout", ["dp2", "dp2xpp2"])
def test_layout_invariant_batches_are_one_ranks(batches, layout):
    for step in VARIANT_STEPS["layout_invariant"]:
        one, other = batches["1"][("layout_invariant", step)], batches[layout][("layout_invariant", step)]
        assert other["indices"] == one["indices"], f"step {step}: other samples"
        assert same_images(other, one) == GLOBAL_BATCH, f"step {step}: other augmentation"


@pytest.mark.parametrize("layout", ["dp2", "dp2xpp2"])
@pytest.mark.parametrize("variant", ["stock", "fast"])
def test_stock_order_depends_on_the_layout(batches, layout, variant):
    """LiBai's CyclicSampler: each data-parallel rank reads its own bucket of the dataset."""
    for step in VARIANT_STEPS[variant]:
        one, other = batches["1"][(variant, step)], batches[layout][(variant, step)]
        assert other["indices"] != one["indices"], f"step {step}: the stock batch did not change (cannot see the bug)"
        assert same_images(other, one) < GLOBAL_BATCH, f"step {step}"


@pytest.mark.parametrize("layout", ["dp2", "dp2xpp2"])
def test_global_order_alone_still_augments_per_rank(batches, layout):
    """Without keyed augmentation each data-parallel rank draws its samples' crops from its own stream."""
    for step in VARIANT_STEPS["unkeyed"]:
        one, other = batches["1"][("unkeyed", step)], batches[layout][("unkeyed", step)]
        assert other["indices"] == one["indices"], f"step {step}"
        assert same_images(other, one) < GLOBAL_BATCH, f"step {step}: the sampler alone kept the augmentation"


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("variant", ["resume_mid", "resume_epoch"])
def test_resume_continues_with_the_uninterrupted_batches(batches, layout, variant):
    """Resumed at step 1 (mid-epoch) and at step 2 (epoch 0's last batch, then epoch 1's first)."""
    for step in VARIANT_STEPS[variant]:
        resumed, straight = batches[layout][(variant, step)], batches["1"][("layout_invariant", step)]
        assert resumed["indices"] == straight["indices"], f"step {step}"
        assert same_images(resumed, straight) == GLOBAL_BATCH, f"step {step}"


def test_each_epoch_is_one_permutation_of_the_dataset(batches):
    steps = [batches["1"][("layout_invariant", s)] for s in VARIANT_STEPS["layout_invariant"]]
    epoch0 = [i for r in steps[:EPOCH_STEPS] for i in r["indices"]]
    assert len(set(epoch0)) == len(epoch0) == EPOCH_STEPS * GLOBAL_BATCH and set(epoch0) <= set(range(DIGITS))
    epoch1 = [i for r in steps[EPOCH_STEPS:] for i in r["indices"]]
    assert len(set(epoch1)) == len(epoch1) and epoch1 != epoch0[:len(epoch1)], "epoch 1 repeats epoch 0's order"
