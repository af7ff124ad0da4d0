"""The multi-rank harness reports a failing rank, and a hang, within its timeout."""
import time

import pytest

from conftest import rank_script
from libai_ext.testing import MultiRankError, launch


@pytest.mark.parametrize("mode, expected_code", [("crash", 3), ("abort", -6)])
def test_failing_rank_is_named_and_peers_are_killed(mode, expected_code):
    start = time.monotonic()
    with pytest.raises(MultiRankError) as err:
        launch(rank_script("crash.py"), 2, [mode, 1], timeout=120)
    assert time.monotonic() - start < 60, "the harness waited for the blocked peer"
    assert f"rank 1 failed with exit code {expected_code}" in str(err.value)
    if mode == "crash":
        assert "rank 1 crashing on purpose" in str(err.value)
    assert err.value.result.returncodes[0] is None  # rank 0 was still blocked, then killed


def test_timeout_names_command_and_running_ranks():
    with pytest.raises(MultiRankError) as err:
        launch(rank_script("crash.py"), 2, ["hang", 99], timeout=8)
    message = str(err.value)
    assert "timed out after" in message and "crash.py" in message
    assert "ranks still running: [0, 1]" in message


def test_expected_failure_is_visible_without_raising():
    result = launch(rank_script("crash.py"), 2, ["crash", 0], timeout=120, check=False)
    assert result.failed_ranks() == [0] and not result.timed_out
