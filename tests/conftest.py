import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RANK_SCRIPTS = os.path.join(ROOT, "tests", "rank_scripts")


def rank_script(name):
    """Absolute path of a script under tests/rank_scripts (run on every rank)."""
    return os.path.join(RANK_SCRIPTS, name)


@pytest.fixture(scope="session")
def repo_root():
    return ROOT


# Rank scripts import `common` as a sibling; tests import them rarely, but keep it importable.
sys.path.insert(0, RANK_SCRIPTS)
