"""No rank outlives its launcher by more than 5 s, under ``timeout`` too.

Under ``timeout`` OneFlow's launcher does not lead its process group, so its ``killpg`` on a
failed rank reaches nobody and the other ranks run on after it exits.  The rank script here
makes that deterministic: rank 0 fails, the others sleep without OneFlow (whose peer check ends
a rank blocked in a collective at some point, which would hide whether anything else ends it).  With ``die_with_launcher`` (what
``tools/train_net.py`` and ``ConsistentBatchTrainer`` call at start-up) they end with the
launcher; with it turned off they are still alive 5 s later: the check sees the bug.
The end-to-end case (a real training job, a rank killed during a save, under ``timeout``) is in
``tests/test_checkpoint_faults.py``.
"""
import os

from conftest import rank_script
from libai_ext.lifetime.launcher import DISABLE_ENV, die_with_launcher, is_oneflow_launcher
from timed_launch import launch_under_timeout

LIMIT_S = 5.0
NPROC = 2


def sleepers_after_a_failure(tmp_path, protected):
    ready = tmp_path / "ready"
    ready.mkdir()
    env = dict(os.environ)
    env[DISABLE_ENV] = "1" if protected else "0"
    return launch_under_timeout(rank_script("outlive_launcher.py"), NPROC, [ready], env=env, timeout_s=120,
                                grace_s=LIMIT_S + 1, log_path=tmp_path / "launch.log")


def test_ranks_end_with_their_launcher_under_timeout(tmp_path):
    result = sleepers_after_a_failure(tmp_path, protected=True)
    assert "rank 1: dies with its launcher: True" in result.log, result.log[-3000:]
    assert result.launcher_end_s is not None and len(result.outlived_s) == NPROC, result
    assert result.longest_outliving() <= LIMIT_S, result.outlived_s


def test_without_it_a_rank_outlives_the_launcher(tmp_path):
    result = sleepers_after_a_failure(tmp_path, protected=False)
    assert "rank 1: dies with its launcher: False" in result.log, result.log[-3000:]
    assert result.longest_outliving() > LIMIT_S, result.outlived_s


def test_only_a_rank_started_by_oneflows_launcher_is_tied_to_its_parent():
    assert not is_oneflow_launcher(os.getppid())  # pytest's parent: a shell or make
    assert die_with_launcher() is False
