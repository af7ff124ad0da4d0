"""Dropout / DropPath masks: equal on replicas, independent across shards, layout-invariant.

Stock OneFlow dropout (what LiBai uses) breaks one rule or the other depending on
seeding, and LiBai's DropPath cannot take tensor-parallel-split inputs.
"""
import itertools

import pytest

from conftest import rank_script, records_of_every_rank
from libai_ext.testing import launch

ALL_SBPS = ("S0,B", "B,S1", "S0,S1")
LAYOUTS = {  # name: (nproc, sbps, extra args)
    "1rank": (1, ["S0,B"], []),
    "dp2": (2, ["S0,B"], ["--dp", 2]),
    "dp2-tp2": (4, ALL_SBPS, ["--dp", 2, "--tp", 2]),
    "dp2-tp2-pp2-last-stage": (8, ALL_SBPS, ["--dp", 2, "--tp", 2, "--pp", 2, "--layer-idx", -1]),
}
IMPLS = ("ours", "stock_rank_seed", "stock_same_seed")
KINDS = ("dropout", "droppath")


@pytest.fixture(scope="module")
def runs():
    results = {}
    for name, (nproc, sbps, args) in LAYOUTS.items():
        result = launch(rank_script("stochastic.py"), nproc, [*args, "--sbps", ";".join(sbps)], timeout=300)
        # Every rank writes one record per (sbp, kind, impl), holding part of the tensor or not.
        records_of_every_rank(result, count=len(sbps) * len(KINDS) * len(IMPLS))
        results[name] = result
    return results


def masks(result, sbp, kind, impl):
    """{rank: {position: kept}} for the ranks that hold part of the tensor."""
    out = {}
    for rank in range(result.nproc):
        for rec in result.records(rank):
            if (rec["sbp"], rec["kind"], rec["impl"]) == (sbp, kind, impl) and rec["mask"]:
                out[rank] = dict(rec["mask"])
    return out


def replicas_agree(per_rank):
    seen = {}
    for mask in per_rank.values():
        for position, keep in mask.items():
            if seen.setdefault(position, keep) != keep:
                return False
    return True


def shard_patterns(per_rank):
    """Keep patterns (in position order) of ranks holding disjoint shards, pairwise."""
    pairs = []
    for a, b in itertools.combinations(per_rank, 2):
        if not set(per_rank[a]) & set(per_rank[b]) and len(per_rank[a]) == len(per_rank[b]):
            pairs.append(([per_rank[a][p] for p in sorted(per_rank[a])],
                          [per_rank[b][p] for p in sorted(per_rank[b])]))
    return pairs


def union(per_rank):
    merged = {}
    for mask in per_rank.values():
        merged.update(mask)
    return merged


MULTI = ["dp2-tp2", "dp2-tp2-pp2-last-stage"]
CASES = [(layout, sbp, kind) for layout in MULTI for sbp in ("S0,B", "B,S1", "S0,S1")
         for kind in ("dropout", "droppath")]


# Pairs of the 4 ranks (2x2 grid) that hold disjoint parts of the same size.  DropPath keeps or
# drops whole samples, so ranks that split only the feature axis hold the same samples.
DISJOINT_PAIRS = {("S0,B", "dropout"): 4, ("B,S1", "dropout"): 4, ("S0,S1", "dropout"): 6,
                  ("S0,B", "droppath"): 4, ("B,S1", "droppath"): 0, ("S0,S1", "droppath"): 4}


@pytest.mark.parametrize("layout, sbp, kind", CASES)
def test_ours_replicas_equal_shards_independent(runs, layout, sbp, kind):
    per_rank = masks(runs[layout], sbp, kind, "ours")
    assert len(per_rank) == 4  # the 4 ranks of the layer's stage
    assert replicas_agree(per_rank)
    pairs = shard_patterns(per_rank)
    assert len(pairs) == DISJOINT_PAIRS[sbp, kind]
    for a, b in pairs:
        assert a != b, "two shards drew the same mask"
    kept = list(union(per_rank).values())
    assert 0.35 < sum(kept) / len(kept) < 0.65


@pytest.mark.parametrize("layout", MULTI)
def test_stock_dropout_breaks_replicas_or_shards(runs, layout):
    # Per-rank seeds: replicas of the same rows draw different masks.
    assert not replicas_agree(masks(runs[layout], "S0,B", "dropout", "stock_rank_seed"))
    # Identical seeds: every shard draws the same pattern.
    pairs = shard_patterns(masks(runs[layout], "S0,S1", "dropout", "stock_same_seed"))
    assert pairs and all(a == b for a, b in pairs)


def test_stock_droppath_fails_on_tensor_parallel_inputs(runs):
    stock_on_split_features = [rec for rec in runs["dp2-tp2"].records(0) if rec["impl"].startswith("stock")
                               and rec["kind"] == "droppath" and "S1" in rec["sbp"]]
    assert len(stock_on_split_features) == 4  # B,S1 and S0,S1, each with per-rank and identical seeds
    for rec in stock_on_split_features:
        assert rec["error"] and "split axis" in rec["error"], rec


def test_ours_is_layout_invariant(runs):
    reference = union(masks(runs["1rank"], "S0,B", "dropout", "ours"))
    assert len(reference) == 64 * 12
    compared = 0
    for layout, (_, sbps, _) in LAYOUTS.items():
        for sbp in sbps:
            per_rank = masks(runs[layout], sbp, "dropout", "ours")
            assert per_rank, f"{layout} {sbp}: no rank reported a mask"
            assert union(per_rank) == reference, f"{layout} {sbp} drew another global mask"
            compared += 1
    assert compared == 1 + 1 + 3 + 3


def test_stock_dropout_depends_on_layout(runs):
    one = union(masks(runs["1rank"], "S0,B", "dropout", "stock_same_seed"))
    eight = union(masks(runs["dp2-tp2-pp2-last-stage"], "S0,B", "dropout", "stock_same_seed"))
    assert set(one) == set(eight) and len(one) == 64 * 12  # the same positions, drawn differently
    assert one != eight
