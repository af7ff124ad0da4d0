import os
import sys

import pytest

from libai_ext.testing import pin_to_device, ranks_device

# In-process tests create OneFlow tensors as well: on a GPU host this process runs on CPU too,
# unless LIBAI_EXT_TEST_DEVICE=cuda.  Set before any test module imports oneflow.
os.environ.update(pin_to_device(os.environ, ranks_device()))

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RANK_SCRIPTS = os.path.join(ROOT, "tests", "rank_scripts")


def rank_script(name):
    """Absolute path of a script under tests/rank_scripts (run on every rank)."""
    return os.path.join(RANK_SCRIPTS, name)


def assert_refused_without_hang(result, message, started="Starting training"):
    """A config refused before any rank talks to another: the job ends by itself, says why, runs nothing.

    Ranks reach the check seconds apart (imports), and OneFlow's launcher terminates the
    others once one exits, so only the ranks that got there first print the refusal.
    """
    assert not result.timed_out, f"the job hung; rank 0 log:\n{result.log(0)[-3000:]}"
    assert result.failed_ranks(), "no rank failed"
    assert result.ranks_logging(message), f"nobody said {message!r}; rank 0 log:\n{result.log(0)[-3000:]}"
    assert not result.ranks_logging(started), "a rank went on past the refusal"


@pytest.fixture(scope="session")
def repo_root():
    return ROOT


# Rank scripts import `common` as a sibling; tests import them rarely, but keep it importable.
sys.path.insert(0, RANK_SCRIPTS)
