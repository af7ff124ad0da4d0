"""Preemption of a real training job: a signal commits the step reached, and --resume continues exactly.

The demo on 2 CPU ranks (``demo_runs``), started by OneFlow's own launcher leading its process
group (a terminal, a batch job), the ranks its direct children as ``make demo`` has them; this
test process reaps them (``ReapedJob``) for their exit codes and end times.  Bounds on time are
one-sided and generous (a loaded 2-core host): ranks must outlive the launcher, and end within
the grace period plus ``SLACK_S``.  Every loss any run records equals the uninterrupted run's
(``demo_reference``), bit for bit.

The ranks stop after the step that follows the one in which the signal arrived (they read, at the
end of each step, the flags all ranks sent at the end of the previous one; one step more when the
signal reaches a rank just as it sends its flag), or at once when the signal comes during an
evaluation (its batches are agreed on one by one).

* Quick tier: SIGTERM to the launcher's process group once 3 iterations are logged (as a
  scheduler signals a job), pp2.  OneFlow's launcher exits at once; both ranks agree on a step,
  commit its checkpoint, log it and exit with 143.
* Long tier, chained (each launch resumes the previous one's commit):
  - pp2: SIGTERM during a periodic save (it commits; the ranks stop after the next step and
    commit that; rank 0 outlives rank 1, which lingers after that commit); during an evaluation (cut short; its step's periodic checkpoint is the one); a
    grace period too short for the save (the save stalls: both ranks end at its end with 124,
    nothing under the new name, the last commit stays); then a resume to the end.
  - dp2: SIGTERM to the ranks only (``srun`` signals its tasks; the launcher stays until a rank
    ends); then a resume to the end.
  - stock LiBai (``DefaultTrainer``) under the same signal: the ranks die, nothing is saved.
"""
import json
import os
import signal

import pytest

from demo_runs import ITERS, NPROC, checkpoint, digits, new_losses, read_text, train_args, train_net
from libai_ext.checkpoint.files import MANIFEST
from libai_ext.lifetime.preemption_signals import EXIT_GRACE_EXPIRED, EXIT_PREEMPTED
from libai_ext.testing.fault_injection import SIGNAL_AT_ENV, SIGNAL_MESSAGE, STALL_AT_ENV, STALL_MESSAGE, STALL_S_ENV, \
    kill_at
from reaped_job import ReapedJob

PERIOD = 3  # periodic checkpoints after iterations 2, 5, 8 and 11
SLACK_S = 10.0
GRACE_S = 25.0  # train.preemption.grace_s's default
# Too short for the save, which stalls, but long enough for the step the ranks finish before it on a busy host.
SHORT_GRACE_S = 20.0
JOB_TIMEOUT_S = 600
LINGER_S = 4.0


class Run:
    """One launch of the demo into ``output``: its job, the loss records it added and the rank logs."""

    def __init__(self, repo_root, data, workdir, layout, name, *, resume=False, extra=(), env=None, act=None,
                 seen=0):
        output = workdir / "run"
        args = (["--resume"] if resume else []) + train_args(repo_root, output, data, layout, PERIOD) + list(extra)
        run_env = dict(os.environ, **(env or {}))
        logs = [output / "log.txt", output / "log.txt.rank1"]  # LiBai appends: this launch's part only
        before = [len(read_text(log)) for log in logs]
        with ReapedJob(train_net(repo_root), NPROC, args, env=run_env, log_path=workdir / f"{name}.log",
                       timeout_s=JOB_TIMEOUT_S) as job:
            job.wait_for_ranks(JOB_TIMEOUT_S)
            if act is not None:
                act(job)
            self.ended = job.wait(JOB_TIMEOUT_S)
        self.job, self.output = job, output
        self.records = new_losses(str(output), seen)
        self.seen = seen + len(self.records)
        self.log = job.log()
        self.rank_logs = [read_text(log)[start:] for log, start in zip(logs, before)]
        self.pointer = read_text(output / "last_checkpoint")  # as this launch left them
        self.folders = sorted(os.listdir(output))

    def iterations(self):
        return [r["iteration"] for r in self.records]

    def manifest_iteration(self, name):
        with open(self.output / name / MANIFEST) as f:
            return json.load(f)["iteration"]


def logged(output):
    return len(new_losses(str(output), 0))


def signal_group_after(iterations, output):
    def act(job):
        job.wait_until(lambda: logged(output) >= iterations, JOB_TIMEOUT_S, f"{iterations} iterations")
        job.signalled_s = job.elapsed()
        job.signal_group(signal.SIGTERM)
    return act


def assert_on_reference(run, reference):
    assert run.records, run.log[-3000:]
    assert all(r["total_loss"] == reference[r["iteration"]] for r in run.records), (run.records, reference)


def assert_preempted(run, iteration, reused=False):
    """Both ranks stopped after ``iteration``, committed its checkpoint, said so, and exited with 143."""
    path = run.output / checkpoint(iteration)
    said = f"every rank stopped after iteration {iteration}; checkpoint {path} is committed" + \
        (" (the periodic save of this iteration)" if reused else "")
    for rank, log in enumerate(run.rank_logs):
        assert said in log and f"exiting with code {EXIT_PREEMPTED}" in log, (rank, log[-3000:])
    assert run.pointer == checkpoint(iteration) and run.manifest_iteration(checkpoint(iteration)) == iteration
    assert not [name for name in run.folders if name.endswith(".uncommitted")]


def test_sigterm_to_the_process_group_commits_the_step_reached(repo_root, tmp_path, tmp_path_factory):
    run = Run(repo_root, digits(tmp_path_factory), tmp_path, "pp2", "preempted",
              extra=[f"train.checkpointer.period={ITERS}"], act=signal_group_after(3, tmp_path / "run"))
    job = run.job
    assert run.ended and not job.leftovers, run.log[-4000:]
    stopped = run.iterations()[-1]
    assert run.iterations() == list(range(stopped + 1)) and 3 <= stopped < ITERS - 1, run.iterations()
    assert_preempted(run, stopped)
    # OneFlow's launcher exited at once; the ranks outlived it, committed, and ended well within the grace period.
    assert "Main process received SIGTERM, exiting" in run.log and job.launcher_rc == 1
    assert job.launcher_ended_s - job.signalled_s < SLACK_S
    assert job.exit_codes() == {0: EXIT_PREEMPTED, 1: EXIT_PREEMPTED}, (job.exit_codes(), run.log[-4000:])
    for rank in range(NPROC):
        assert job.launcher_ended_s < job.ended_s[rank] < job.signalled_s + GRACE_S + SLACK_S, job.ended_s


# --- long tier ---------------------------------------------------------------------------------

def injected(**actions):
    """The fault-injection variables for ``signal=(rank, phase, target)`` and ``stall=(...)``."""
    names = {"signal": SIGNAL_AT_ENV, "stall": STALL_AT_ENV}
    return {names[kind]: kill_at(*where) for kind, where in actions.items()}


@pytest.fixture(scope="module")
def pp2_chain(repo_root, tmp_path_factory, demo_reference):
    workdir, data = tmp_path_factory.mktemp("preemption-pp2"), digits(tmp_path_factory)
    # Rank 1 lingers after the preemption's commit: rank 0 (OneFlow's control server) must outlive it.
    runs = {"during_save": Run(repo_root, data, workdir, "pp2", "during_save",
                               env=dict(injected(signal=(0, "mid_weights", checkpoint(2)),
                                                 stall=(1, "after_commit", checkpoint(3))),
                                        **{STALL_S_ENV: str(LINGER_S)}))}
    runs["during_eval"] = Run(repo_root, data, workdir, "pp2", "during_eval", resume=True,
                              seen=runs["during_save"].seen,
                              extra=["train.evaluation.enabled=True", "train.evaluation.eval_period=6"],
                              env=injected(signal=(1, "mid_evaluation", checkpoint(5))))
    runs["short_grace"] = Run(repo_root, data, workdir, "pp2", "short_grace", resume=True,
                              seen=runs["during_eval"].seen, extra=[f"train.preemption.grace_s={SHORT_GRACE_S:g}"],
                              env=injected(signal=(0, "before_agreement", checkpoint(6)),
                                           stall=(0, "mid_weights", "*")))
    runs["final"] = Run(repo_root, data, workdir, "pp2", "final", resume=True, seen=runs["short_grace"].seen)
    return demo_reference("pp2"), runs


@pytest.mark.long
def test_sigterm_during_a_periodic_save_lets_it_commit_then_stops_after_the_next_step(pp2_chain):
    reference, runs = pp2_chain
    run = runs["during_save"]
    assert f"{SIGNAL_MESSAGE} rank 0 at mid_weights of {checkpoint(2)}" in run.log
    assert run.ended and not run.job.leftovers and run.iterations() == [0, 1, 2, 3], run.log[-4000:]
    assert f"committed checkpoint {run.output}/{checkpoint(2)} " in run.rank_logs[0]
    assert_preempted(run, 3)
    assert run.job.exit_codes() == {0: EXIT_PREEMPTED, 1: EXIT_PREEMPTED}
    # Ended at once, rank 0 left LINGER_S before rank 1 (a rank still waiting on a barrier's answer then aborts).
    assert run.job.ended_s[0] > run.job.ended_s[1] - LINGER_S / 2, run.job.ended_s
    assert_on_reference(run, reference)


@pytest.mark.long
def test_sigterm_during_an_evaluation_cuts_it_short_and_stops_after_its_step(pp2_chain):
    reference, runs = pp2_chain
    run = runs["during_eval"]
    assert f"{SIGNAL_MESSAGE} rank 1 at mid_evaluation of {checkpoint(5)}" in run.log
    assert f"Loading checkpoint from {run.output}/{checkpoint(3)}" in run.rank_logs[0]
    assert run.ended and run.iterations() == [4, 5], run.log[-4000:]
    for log in run.rank_logs:
        assert "evaluation at iteration 5 interrupted by a preemption: its results are not recorded" in log
    assert_preempted(run, 5, reused=True)  # the periodic checkpoint of iteration 5, committed before the evaluation
    assert run.job.exit_codes() == {0: EXIT_PREEMPTED, 1: EXIT_PREEMPTED}
    assert_on_reference(run, reference)


def stalled_save(run):
    """The checkpoint whose save stalled (``LIBAI_EXT_STALL_AT``) in ``run``, and its iteration."""
    line = next(line for line in run.log.splitlines() if STALL_MESSAGE in line)
    name = line.rsplit(" of ", 1)[1]
    return name, int(name.rsplit("_", 1)[1])


@pytest.mark.long
def test_a_grace_period_too_short_leaves_the_last_commit_as_the_resume_point(pp2_chain):
    reference, runs = pp2_chain
    run, job = runs["short_grace"], runs["short_grace"].job
    assert f"Loading checkpoint from {run.output}/{checkpoint(5)}" in run.rank_logs[0]
    # The signal came at the end of step 6: the ranks stop after 7 (or 8, if rank 0's own flag was sent before
    # its handler ran); the save that stalls is the preemption's (or the periodic one of 8, saved first).
    stalled, stopped = stalled_save(run)
    assert stopped in (7, 8) and run.ended and not job.leftovers, run.log[-4000:]
    assert run.iterations() == list(range(6, stopped + 1)), run.iterations()
    assert job.exit_codes() == {0: EXIT_GRACE_EXPIRED, 1: EXIT_GRACE_EXPIRED}, (job.exit_codes(), run.log[-4000:])
    assert f"the grace period of {SHORT_GRACE_S:g} s (train.preemption.grace_s) ran out before the checkpoint was " \
           "committed" in run.log
    # Both ranks outlived the launcher, waited for the stalled save, and ended at the end of the grace period.
    for rank in range(NPROC):
        assert SHORT_GRACE_S / 2 < job.ended_s[rank] - job.launcher_ended_s < SHORT_GRACE_S + SLACK_S, job.ended_s
    # Nothing under the new name; the stalled save sits under its temporary name; the last commit stays.
    assert stalled not in run.folders and f"{stalled}.uncommitted" in run.folders
    assert run.pointer == checkpoint(5)
    assert_on_reference(run, reference)


@pytest.mark.long
def test_the_resume_after_those_preemptions_finishes_on_the_reference(pp2_chain):
    reference, runs = pp2_chain
    run = runs["final"]
    stalled, _ = stalled_save(runs["short_grace"])
    for log in run.rank_logs:
        assert f"--resume: skipping {run.output}/{stalled}.uncommitted: its save was interrupted" in log
    assert f"Loading checkpoint from {run.output}/{checkpoint(5)}" in run.rank_logs[0]
    assert run.ended and run.job.launcher_rc == 0 and run.iterations() == list(range(6, ITERS)), run.log[-4000:]
    assert run.pointer == "model_final"
    assert_on_reference(run, reference)


@pytest.fixture(scope="module")
def dp2_chain(repo_root, tmp_path_factory, demo_reference):
    workdir, data = tmp_path_factory.mktemp("preemption-dp2"), digits(tmp_path_factory)
    output = workdir / "run"

    def signal_ranks(job):
        job.wait_until(lambda: logged(output) >= 2, JOB_TIMEOUT_S, "2 iterations")
        job.signalled_s = job.elapsed()
        job.signal_ranks(signal.SIGTERM)

    runs = {"ranks_only": Run(repo_root, data, workdir, "dp2", "ranks_only", act=signal_ranks)}
    runs["final"] = Run(repo_root, data, workdir, "dp2", "final", resume=True, seen=runs["ranks_only"].seen)
    return demo_reference("dp2"), runs


@pytest.mark.long
def test_sigterm_to_the_ranks_only_commits_and_the_resume_is_exact(dp2_chain):
    reference, runs = dp2_chain
    run, final = runs["ranks_only"], runs["final"]
    assert run.ended and not run.job.leftovers, run.log[-4000:]
    stopped = run.iterations()[-1]
    assert run.iterations() == list(range(stopped + 1)) and stopped < ITERS - 1, run.iterations()
    assert_preempted(run, stopped, reused=stopped == PERIOD - 1)
    # The launcher lived on until a rank ended, then stopped the job: its error names the rank's exit code.
    assert f"returned non-zero exit status {EXIT_PREEMPTED}" in run.log and run.job.launcher_rc == 1
    assert set(run.job.exit_codes().values()) <= {EXIT_PREEMPTED, None}, run.job.exit_codes()
    assert_on_reference(run, reference)
    assert f"Loading checkpoint from {run.output}/{checkpoint(stopped)}" in final.rank_logs[0]
    assert final.ended and final.iterations() == list(range(stopped + 1, ITERS)), final.log[-4000:]
    assert_on_reference(final, reference)


@pytest.mark.long
def test_stock_libai_loses_every_step_since_the_last_checkpoint(repo_root, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("preemption-stock")
    output = workdir / "run"
    run = Run(repo_root, digits(tmp_path_factory), workdir, "pp2", "stock", act=signal_group_after(3, output),
              extra=["train.trainer=libai.engine.DefaultTrainer", f"train.checkpointer.period={ITERS}"])
    assert run.ended and not run.job.leftovers and len(run.iterations()) >= 3, run.log[-4000:]
    assert all(code is None or code < 0 for code in run.job.exit_codes().values()), run.job.exit_codes()
    assert not [name for name in run.folders if name.startswith("model_")] and not run.pointer
