"""seed_everything: the same python, numpy and OneFlow streams on every rank; bad seeds refused."""
import pytest

from conftest import rank_script
from libai_ext import seed_everything
from libai_ext.testing import launch

NPROC = 4


def test_all_ranks_draw_the_same_after_seeding():
    result = launch(rank_script("seeding.py"), NPROC, ["--seed", 7], timeout=180)
    reference = result.record(0)
    for rank in range(NPROC):
        assert result.records(rank)[0] == {"seed_used": 7}
        assert result.record(rank) == reference, f"rank {rank} drew other numbers"


def test_unseeded_ranks_differ():
    """Without the hook (stock LiBai), python's streams differ per rank: what seeding fixes."""
    result = launch(rank_script("seeding.py"), 2, [], timeout=180)
    assert result.record(0)["python"] != result.record(1)["python"]


@pytest.mark.parametrize("bad", [-1, 2 ** 32, 1.5, "7", True, None])
def test_bad_seed_is_refused_with_the_key(bad):
    with pytest.raises((TypeError, ValueError), match="train.seed"):
        seed_everything(bad)


def test_bad_seed_stops_every_rank():
    result = launch(rank_script("seeding.py"), 2, ["--seed", "-5"], timeout=120, check=False,
                    stop_on_failure=False)
    assert not result.timed_out
    assert result.failed_ranks() == [0, 1]
    assert "train.seed=-5" in result.log(1)
