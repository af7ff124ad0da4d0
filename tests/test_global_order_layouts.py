"""dp2 with 16 samples per rank reads the same global batches as 1 rank with 32.

LiBai's real image loader over the digits (the first 100: an epoch is 3 global batches of 32),
built by each trainer, no mixup, augmentation drawing from python, numpy and OneFlow
(rank_scripts/global_order.py).  Under ``train.randomness="layout_invariant"`` the global batch
of every step holds the same samples, augmented identically, on 1 rank, dp2 and dp2 x pp2, and
a run resumed from ``consumed_samples`` (mid-epoch, and at an epoch's last batch) continues
with the uninterrupted run's batches.  Stock LiBai and the "fast" mode read other samples
(each data-parallel rank its own bucket of the dataset), and the global-order sampler without
keyed augmentation reads the right samples but augments them differently.

Accumulation (2 steps, one global batch of 32), eager and graph mode: the union of what every
rank reads per optimizer step is the 1-rank global batch, sample by sample in its global position.
Evaluation through LiBai's own evaluator covers the same samples in the same order on every
layout (global test batch 8), truncated by ``eval_iter`` or not; stock LiBai's truncated
evaluation covers other samples on dp2.
"""
import pytest

from conftest import records_of_every_rank, rank_script
from libai_ext.compat import libai_line
from libai_ext.testing import launch

LAYOUTS = {"1": (1, []), "dp2": (2, ["--dp", 2]), "dp2xpp2": (4, ["--dp", 2, "--pp", 2])}
STAGE0_RANKS = {"1": [0], "dp2": [0, 1], "dp2xpp2": [0, 1]}
# rank_scripts/global_order.py: variant -> the steps (of the uninterrupted run) it records.
VARIANT_STEPS = {"layout_invariant": [0, 1, 2, 3, 4], "fast": [0, 1], "stock": [0, 1], "unkeyed": [0, 1],
                 "resume_mid": [1, 2], "resume_epoch": [2, 3]}
EPOCH_STEPS, GLOBAL_BATCH, DIGITS = 3, 32, 100
ACCUMULATION, STEPS = 2, 4  # the accumulation variants record steps 0-3 (3: epoch 1's first)
# 0.1.1's graph loader reads a rank's whole slice per batch; main's reads micro-batches its trainer joins.
GRAPH_BATCHES = STEPS if libai_line().NAME == "LiBai 0.1.1" else STEPS * ACCUMULATION
ACC_BATCHES = {"acc2": STEPS * ACCUMULATION, "acc2_graph": GRAPH_BATCHES}
EVALUATIONS = ["eval_truncated", "eval_stock_truncated", "eval_full"]
EVAL_DIGITS, EVAL_TRUNCATED = 45, 24


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """{layout: (result, stage-0 records by rank)}, every rank's summary checked."""
    data = tmp_path_factory.mktemp("digits")
    joined = {**{v: len(s) for v, s in VARIANT_STEPS.items()}, **ACC_BATCHES, **{v: 1 for v in EVALUATIONS}}
    out = {}
    for layout, (nproc, args) in LAYOUTS.items():
        result = launch(rank_script("global_order.py"), nproc, [*args, "--data", data], timeout=300)
        stage0 = STAGE0_RANKS[layout]
        by_rank = records_of_every_rank(result, stage0)
        for rank in range(nproc):
            summary = result.records(rank)[-1]
            assert summary["variant"] == "summary" and summary["stage0"] == (rank in stage0), f"{layout} rank {rank}"
            assert summary["joined"] == joined, f"{layout} rank {rank}"
        out[layout] = (result, by_rank)
    return out


@pytest.fixture(scope="module")
def batches(launched):
    """{layout: {(variant, step): global batch record}} as rank 0 saw them (every stage-0 rank saw the same)."""
    out = {}
    for layout, (_, by_rank) in launched.items():
        replicas = [[r for r in records if r["variant"] in VARIANT_STEPS] for records in by_rank.values()]
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


def by_global_position(records):
    """{(step, position in the step's global batch): (index, image digest)} from every rank's own batches."""
    read = {}
    for record in records:
        for position, index, image in zip(record["positions"], record["indices"], record["images"]):
            key = (record["step"], position)
            assert key not in read, f"position {key} read twice"
            read[key] = (index, image)
    return read


@pytest.mark.parametrize("variant", list(ACC_BATCHES))
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_accumulation_reads_the_one_rank_global_batches(launched, batches, layout, variant):
    _, by_rank = launched[layout]
    records = [r for records in by_rank.values() for r in records if r["variant"] == variant]
    assert len(records) == ACC_BATCHES[variant] * len(by_rank)
    one = {}
    for step in range(STEPS):
        batch = batches["1"][("layout_invariant", step)]
        one.update({(step, p): pair for p, pair in enumerate(zip(batch["indices"], batch["images"]))})
    assert by_global_position(records) == one


def scored(launched, layout):
    """{evaluation variant: the samples it scored, in order} as rank 0 reported them."""
    result, _ = launched[layout]
    return {r["variant"]: r["scored"] for r in result.records(0) if r["variant"] in EVALUATIONS}


@pytest.mark.parametrize("layout", ["dp2", "dp2xpp2"])
def test_evaluation_covers_the_same_samples_on_every_layout(launched, layout):
    """One order of the test set (dataset order on 0.1.1; main's test loader shuffles: one keyed permutation)."""
    one, other = scored(launched, "1"), scored(launched, layout)
    assert sorted(one["eval_full"]) == list(range(EVAL_DIGITS))
    assert one["eval_truncated"] == one["eval_full"][:EVAL_TRUNCATED]
    assert other["eval_full"] == one["eval_full"] and other["eval_truncated"] == one["eval_truncated"]
    if layout == "dp2":  # stock: each data-parallel rank scores the head of its own bucket
        assert len(set(other["eval_stock_truncated"])) == EVAL_TRUNCATED
        assert sorted(other["eval_stock_truncated"]) != sorted(one["eval_stock_truncated"]), "stock cannot see the bug"
    # (stock on dp2 x pp2 reads bucket 0 on both stage-0 ranks: LiBai's data-parallel rank ignores the placement)
