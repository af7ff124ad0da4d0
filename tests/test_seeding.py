"""seed_everything: the same python, numpy and OneFlow streams on every rank; bad seeds refused."""
import pytest

from conftest import assert_refused_without_hang, long_tier_selected, rank_script, records_of_every_rank
from libai_ext import seed_everything
from libai_ext.testing import launch

NPROC = 4
SCOPES = ("global", "data_parallel", "rank")
DRAWS = ("numpy", "oneflow", "python")


def seeding_run(nproc, *args, scopes=("global",)):
    """``{rank: {scope: record}}`` of one launch: unseeded draws (scope None), then seed 7 under each scope."""
    result = launch(rank_script("seeding.py"), nproc, ["--unseeded-first", "--seed", 7, "--scopes", ",".join(scopes),
                                                       *args], timeout=300)
    by_rank = records_of_every_rank(result, count=1 + len(scopes))
    return {rank: {record["scope"]: record for record in records} for rank, records in by_rank.items()}


@pytest.fixture(scope="module")
def scoped_draws():
    """(2, 2, 2) on 8 ranks, every scope in one launch: data-parallel groups are {0, 1, 4, 5} and {2, 3, 6, 7}."""
    return seeding_run(8, "--dp", 2, "--tp", 2, "--pp", 2, scopes=SCOPES)


@pytest.fixture(scope="module")
def draws(request):
    """Unseeded, then globally seeded draws on 4 ranks; where the long tier runs too, from its 8-rank launch, which
    holds both."""
    return request.getfixturevalue("scoped_draws") if long_tier_selected(request) else seeding_run(NPROC)


def drawn(record):
    return {name: record[name] for name in DRAWS}


def test_all_ranks_draw_the_same_after_seeding(draws):
    reference = drawn(draws[0]["global"])
    for rank, by_scope in draws.items():
        assert by_scope["global"]["seed_used"] == 7
        assert drawn(by_scope["global"]) == reference, f"rank {rank} drew other numbers"


@pytest.mark.long
@pytest.mark.parametrize("scope", SCOPES)
def test_scope_shares_streams_on_exactly_the_promised_ranks(scoped_draws, scope):
    draws = {rank: (by_scope[scope]["dp_group"], drawn(by_scope[scope])) for rank, by_scope in scoped_draws.items()}
    assert [draws[r][0] for r in range(8)] == [0, 0, 1, 1, 0, 0, 1, 1]
    for a in range(8):
        for b in range(a + 1, 8):
            shared = {"global": True, "data_parallel": draws[a][0] == draws[b][0], "rank": False}[scope]
            assert (draws[a][1] == draws[b][1]) == shared, f"ranks {a} and {b} under scope {scope}"


def test_unseeded_ranks_differ(draws):
    """Without the hook (stock LiBai), python's streams differ per rank: what seeding fixes."""
    assert draws[0][None]["python"] != draws[1][None]["python"]


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
