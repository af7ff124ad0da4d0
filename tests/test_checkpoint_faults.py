"""A rank killed -9 at any phase of a checkpoint save: the run resumes from the last committed
checkpoint, and its per-iteration losses equal the uninterrupted run's.

The demo on 2 CPU ranks, ``train.checkpointer.period=3`` (checkpoints after iterations 2, 5, 8,
11), augmentation and mixup on.  Kills are injected by ``LIBAI_EXT_KILL_AT``
(``libai_ext.testing.fault_injection``): rank r sends itself SIGKILL when the save of one
checkpoint reaches one phase (before the weights, mid-weights, after the weights and before its
random state, before the commit, after the commit).

* Quick tier: rank 0 killed mid-weights on pp2, under ``timeout`` as ``make demo`` runs it (no
  rank may outlive the launcher by more than 5 s), then resumed.  The killed run is the
  uninterrupted one up to the kill: the resumed run must repeat its losses exactly.
* Long tier: every phase x each rank on pp2, chained so that each launch both resumes the previous
  case and is killed for the next one (11 launches); every loss any run records equals the
  uninterrupted reference run's (``demo_reference``, shared with the preemption tests).  pp2, where
  each rank writes its own stage's weights: the commit does not depend on the layout, and dp2's
  saves are killed by SIGTERM in ``tests/test_preemption.py``.
"""
import os

import pytest

from demo_runs import ITERS, NPROC, checkpoint, digits, new_losses, read_text, train_args, train_net
from libai_ext.testing import launch, read_raw_losses
from libai_ext.testing.fault_injection import KILL_AT_ENV, KILL_MESSAGE, PHASES, kill_at
from timed_launch import launch_under_timeout

PERIOD = 3
LIMIT_S = 5.0


def test_rank0_killed_mid_weights_resumes_from_the_last_commit(repo_root, tmp_path, tmp_path_factory):
    output, data = tmp_path / "run", digits(tmp_path_factory)
    args = train_args(repo_root, output, data, "pp2", PERIOD, iters=8)
    env = dict(os.environ, **{KILL_AT_ENV: kill_at(0, "mid_weights", checkpoint(5))})
    killed = launch_under_timeout(train_net(repo_root), NPROC, args, env=env, timeout_s=400, grace_s=LIMIT_S + 5,
                                  log_path=tmp_path / "killed.log")
    assert f"{KILL_MESSAGE} rank 0 at mid_weights of {checkpoint(5)}" in killed.log, killed.log[-3000:]
    assert killed.launcher_rc != 0 and len(killed.outlived_s) == NPROC
    assert killed.longest_outliving() <= LIMIT_S, killed.outlived_s
    assert "rank 1 ends with its launcher" in read_text(output / "log.txt.rank1")
    # The kill left the last commit and its pointer as they were, the half-written save under a temp name.
    assert (output / "last_checkpoint").read_text() == checkpoint(2)
    assert not (output / checkpoint(5)).exists() and (output / f"{checkpoint(5)}.uncommitted").is_dir()
    before = read_raw_losses(output)
    assert [r["iteration"] for r in before] == [0, 1, 2, 3, 4]

    resumed = launch(train_net(repo_root), NPROC, ["--resume", *args], timeout=400, workdir=str(tmp_path / "resumed"))
    for rank, log in ((0, resumed.log(0)), (1, read_text(output / "log.txt.rank1"))):
        assert f"--resume: skipping {output}/{checkpoint(5)}.uncommitted: its save was interrupted" in log, rank
    assert f"Loading checkpoint from {output}/{checkpoint(2)}" in resumed.log(0)
    after = new_losses(output, len(before))
    assert [r["iteration"] for r in after] == [3, 4, 5, 6, 7]
    assert after[:2] == before[3:], "the resumed run does not repeat the interrupted run's losses"
    assert not [name for name in os.listdir(output) if name.endswith(".uncommitted")]
    assert (output / "last_checkpoint").read_text() == "model_final"


# --- long tier: every phase x each rank, on pp2 and dp2 ---------------------------------------

CASES = [(rank, phase) for phase in PHASES for rank in range(NPROC)]
# after_commit cases move the last commit from 2 to 5 to 8; the final run ends at ITERS - 1 = 11


def run_matrix(repo_root, workdir, data, layout):
    """One launch per case (each resumes the previous case), then a final resume.

    Returns ({case: outcome}, final run's records, last commit, output folder).
    """
    output, args = workdir / "run", train_args(repo_root, workdir / "run", data, layout, PERIOD)
    committed, seen, outcomes, previous = None, 0, {}, None
    for index, (rank, phase) in enumerate(CASES):
        target = (committed + PERIOD) if committed is not None else 2 * PERIOD - 1
        env = dict(os.environ, **{KILL_AT_ENV: kill_at(rank, phase, checkpoint(target))})
        result = launch(train_net(repo_root), NPROC, (["--resume"] if index else []) + args, timeout=600, env=env,
                        check=False, workdir=str(workdir / f"case{index}-logs"))
        records = new_losses(output, seen)
        seen += len(records)
        resumed_from = committed
        committed = target if phase == "after_commit" else (PERIOD - 1 if committed is None else committed)
        outcomes[(rank, phase)] = {
            "target": checkpoint(target),
            "killed": f"{KILL_MESSAGE} rank {rank} at {phase} of {checkpoint(target)}" in result.log(rank),
            "failed": result.failed_ranks(), "timed_out": result.timed_out,
            "records": records, "resumed_from": resumed_from, "previous": previous, "resume_log": None,
            "expected_commit": checkpoint(committed),
            "pointer": read_text(output / "last_checkpoint"),
            "folder": (output / checkpoint(target)).is_dir(),
            "staged": (output / f"{checkpoint(target)}.uncommitted").is_dir(),
        }
        if previous is not None:
            outcomes[previous]["resume_log"] = (result.log(0), read_text(output / "log.txt.rank1"))
        previous = (rank, phase)
    final = launch(train_net(repo_root), NPROC, ["--resume"] + args, timeout=600, workdir=str(workdir / "final-logs"))
    outcomes[previous]["resume_log"] = (final.log(0), read_text(output / "log.txt.rank1"))
    return outcomes, new_losses(output, seen), committed, output


@pytest.fixture(scope="module", params=["pp2"])
def matrix(request, repo_root, tmp_path_factory, demo_reference):
    workdir = tmp_path_factory.mktemp(f"faults-{request.param}")
    reference = demo_reference(request.param)
    return request.param, (reference, *run_matrix(repo_root, workdir, digits(tmp_path_factory), request.param))


@pytest.mark.long
@pytest.mark.parametrize("rank, phase", CASES)
def test_a_kill_at_any_phase_resumes_the_last_commit_exactly(matrix, rank, phase):
    layout, (reference, outcomes, _, _, output) = matrix
    case = outcomes[(rank, phase)]
    assert case["killed"] and case["failed"] and not case["timed_out"], (layout, case["failed"])
    # last_checkpoint moves only after a commit; a save cut short leaves no folder under its name.
    assert case["pointer"] == case["expected_commit"]
    assert case["folder"] == (phase == "after_commit")
    # This launch resumed the previous case's last commit (or started afresh), and repeated the reference.
    first = 0 if case["resumed_from"] is None else int(case["resumed_from"]) + 1
    assert case["records"] and case["records"][0]["iteration"] == first, case["records"]
    assert all(r["total_loss"] == reference[r["iteration"]] for r in case["records"]), (case["records"], reference)
    # The next launch resumed the commit this kill left, and every rank named what it skipped.
    main_log, rank1_log = case["resume_log"]
    assert f"Loading checkpoint from {output}/{case['expected_commit']}" in main_log
    if case["staged"]:
        for log in (main_log, rank1_log):
            assert f"--resume: skipping {output}/{case['target']}.uncommitted" in log


@pytest.mark.long
def test_the_final_resume_finishes_on_the_reference(matrix):
    layout, (reference, outcomes, final_records, committed, output) = matrix
    assert len(outcomes) == len(CASES) == 10
    assert [r["iteration"] for r in final_records] == list(range(committed + 1, ITERS))
    assert all(r["total_loss"] == reference[r["iteration"]] for r in final_records)
    assert (output / "last_checkpoint").read_text() == "model_final"
