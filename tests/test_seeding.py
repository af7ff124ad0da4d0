"""seed_everything: the same python, numpy and OneFlow streams on every rank; bad seeds refused."""
import pytest

from conftest import assert_refused_without_hang, rank_script, records_of_every_rank
from libai_ext import seed_everything
from libai_ext.testing import launch

NPROC = 4


def test_all_ranks_draw_the_same_after_seeding():
    result = launch(rank_script("seeding.py"), NPROC, ["--seed", 7], timeout=180)
    by_rank = records_of_every_rank(result, count=2)  # the seed used, then the draws
    reference = by_rank[0][1]
    assert sorted(reference) == ["numpy", "oneflow", "python"]
    for rank, (seeded, drawn) in by_rank.items():
        assert seeded["seed_used"] == 7
        assert drawn == reference, f"rank {rank} drew other numbers"


@pytest.fixture(scope="module")
def scoped_draws():
    """(2, 2, 2) on 8 ranks: data-parallel groups are {0, 1, 4, 5} and {2, 3, 6, 7}."""
    results = {}
    for scope in ("global", "data_parallel", "rank"):
        run = launch(rank_script("seeding.py"), 8, ["--dp", 2, "--tp", 2, "--pp", 2, "--seed", 7,
                                                     "--scope", scope], timeout=300)
        by_rank = records_of_every_rank(run, count=2)
        results[scope] = {r: (seeded["dp_group"], drawn) for r, (seeded, drawn) in by_rank.items()}
    return results


@pytest.mark.long
@pytest.mark.parametrize("scope", ["global", "data_parallel", "rank"])
def test_scope_shares_streams_on_exactly_the_promised_ranks(scoped_draws, scope):
    draws = scoped_draws[scope]
    assert [draws[r][0] for r in range(8)] == [0, 0, 1, 1, 0, 0, 1, 1]
    for a in range(8):
        for b in range(a + 1, 8):
            shared = {"global": True, "data_parallel": draws[a][0] == draws[b][0], "rank": False}[scope]
            assert (draws[a][1] == draws[b][1]) == shared, f"ranks {a} and {b} under scope {scope}"


def test_unseeded_ranks_differ():
    """Without the hook (stock LiBai), python's streams differ per rank: what seeding fixes."""
    result = launch(rank_script("seeding.py"), 2, [], timeout=180)
    by_rank = records_of_every_rank(result, count=1)
    assert by_rank[0][0]["python"] != by_rank[1][0]["python"]


@pytest.mark.parametrize("bad", [-1, 2 ** 32, 1.5, "7", True, None])
def test_bad_seed_is_refused_with_the_key(bad):
    with pytest.raises((TypeError, ValueError), match="train.seed"):
        seed_everything(bad)


def test_bad_scope_is_refused_with_the_key():
    with pytest.raises(ValueError, match="train.seed_scope='tensor'"):
        seed_everything(1, scope="tensor")


def test_bad_seed_stops_every_rank():
    result = launch(rank_script("seeding.py"), 2, ["--seed", "-5"], timeout=120, check=False,
                    stop_on_failure=False)
    assert_refused_without_hang(result, "train.seed=-5 is outside")
    assert not any(result.records(rank) for rank in range(2)), "a rank went on past the refusal"
