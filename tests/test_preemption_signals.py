"""Preemption signals with OneFlow's real launcher: ranks outlive its immediate exit to save, and always end.

The ranks here (``rank_scripts/preemption_plumbing.py``) train nothing and import no OneFlow: they
arm ``PreemptionWatcher`` as the trainer does, "save" for a few seconds once a signal came, and
exit as a preempted rank does.  The launcher is OneFlow's own, leading its process group as in a
terminal or a batch job, and this test process reaps the ranks (``ReapedJob``) to read their exit
codes and end times.  Time bounds are one-sided and generous (a loaded 2-core host): a rank must
outlive the launcher, and must end within its grace period plus ``SLACK_S``.

Quick tier: one job signalled as a scheduler signals a job (SIGTERM to the launcher's process
group).  OneFlow's launcher re-sends SIGTERM to its group and exits at once; each rank plays one
case: saves and exits 143; a second SIGTERM during the save ends it (130); so does SIGINT; a
grace period too short ends it at its end (124); and a rank without the watcher (a plain
Python handler and ``die_with_launcher``, what the trainer did before) is killed the moment the
launcher exits, its save cut short: the bug.

Long tier: SIGTERM to the ranks only (``srun`` signals its tasks); to the launcher only
(Kubernetes signals the container's first process); a failed rank while the launcher leads the
group (its SIGTERM is no preemption: the other ranks end at once) and under ``timeout`` (the
launcher leads no group: the ranks end with it, as ``die_with_launcher`` promises).
"""
import signal

import pytest
from omegaconf import OmegaConf

from conftest import rank_script
from libai_ext.lifetime.preemption import preemption_settings
from libai_ext.lifetime.preemption_signals import ECHO_WINDOW_S, EXIT_GRACE_EXPIRED, EXIT_INTERRUPTED, EXIT_PREEMPTED
from reaped_job import ReapedJob

SLACK_S = 5.0  # scheduling delays on a loaded host: how late an end may come, never how early
START_TIMEOUT_S = 120


def run(tmp_path, save_s, grace_s, act, nproc, fail="0", under_timeout=False):
    """Start a job of plumbing ranks, wait until each armed its watcher, ``act(job)``, wait for every end."""
    out = tmp_path / "out"
    out.mkdir()
    args = [out, save_s, grace_s, fail]
    with ReapedJob(rank_script("preemption_plumbing.py"), nproc, args, log_path=tmp_path / "job.log", timeout_s=180,
                   under_timeout=under_timeout) as job:
        job.wait_for_ranks(START_TIMEOUT_S)
        job.wait_until(lambda: all((out / f"armed.{rank}").exists() for rank in range(nproc)), START_TIMEOUT_S,
                       "every rank to arm its watcher")
        act(job)
        ended = job.wait(120)
    assert ended and not job.leftovers, (job.leftovers, job.log()[-4000:])
    assert sorted(job.ended_s) == list(range(nproc)), (job.ranks, job.ended_s, job.codes, job.log()[-4000:])
    return job


def signalled_at(job):
    job.signalled_s = job.elapsed()
    return job.signalled_s


def test_ranks_outlive_the_launcher_to_save_and_every_rank_ends_in_time(tmp_path):
    second_s = ECHO_WINDOW_S + 1.5

    def act(job):
        signalled = signalled_at(job)
        job.signal_group(signal.SIGTERM)
        job.wait_until(lambda: job.elapsed() > signalled + second_s, 60, "the second signals' time")
        job.signal_ranks(signal.SIGTERM, [1])
        job.signal_ranks(signal.SIGINT, [2])

    # rank: 0 saves in 2 s; 1 and 2 would save for 60 s; 3 has 4 s of grace; 4 has no watcher
    job = run(tmp_path, "2,60,60,60,2", "30,30,30,4,0", act, nproc=5)
    log, codes, t0 = job.log(), job.exit_codes(), job.signalled_s
    after = {rank: job.ended_s[rank] - t0 for rank in job.ranks}
    launcher_after = job.launcher_ended_s - t0
    assert "Main process received SIGTERM, exiting" in log and job.launcher_rc == 1  # OneFlow's own launcher
    assert launcher_after < SLACK_S, launcher_after
    assert codes == {0: EXIT_PREEMPTED, 1: EXIT_INTERRUPTED, 2: EXIT_INTERRUPTED, 3: EXIT_GRACE_EXPIRED,
                     4: -signal.SIGKILL}, (codes, log[-4000:])
    # The saving ranks outlived the launcher; the launcher's own copy of SIGTERM did not count as a second one.
    assert "rank 0: committed" in log and 2.0 <= after[0] < 2.0 + SLACK_S, after
    assert all(after[rank] > launcher_after for rank in (0, 1, 2, 3)), (after, launcher_after)
    assert "rank 1: a second SIGTERM ended the save: exiting with code 130" in log
    assert second_s <= after[1] < second_s + SLACK_S and second_s <= after[2] < second_s + SLACK_S, after
    assert "rank 3: the grace period of 4 s (train.preemption.grace_s) ran out before the checkpoint was " \
           "committed" in log
    assert 3.5 <= after[3] <= 4.0 + SLACK_S, after
    # Without the watcher the launcher's exit kills the rank mid-save, although it had time to save.
    assert "rank 4: request seen (SIGTERM): saving" in log and "rank 4: committed" not in log
    assert after[4] < launcher_after + SLACK_S, (after, launcher_after)


def signalling(target):
    def act(job):
        signalled_at(job)
        (job.signal_ranks if target == "ranks" else job.signal_launcher)(signal.SIGTERM)
    return act


@pytest.mark.long
@pytest.mark.parametrize("target", ["ranks", "launcher"])
def test_a_signal_to_the_ranks_only_or_to_the_launcher_only_is_committed(tmp_path, target):
    job = run(tmp_path, "2", "30", signalling(target), nproc=2)
    log, codes = job.log(), job.exit_codes()
    for rank in range(2):
        assert f"rank {rank}: committed" in log, log[-3000:]
        assert 2.0 <= job.ended_s[rank] - job.signalled_s < 2.0 + SLACK_S
    if target == "ranks":
        # srun signals its tasks: the launcher lives on until a rank ends, then ends the job; its error names
        # the first rank's exit code (that rank is its to reap).
        assert f"returned non-zero exit status {EXIT_PREEMPTED}" in log and job.launcher_rc == 1
        assert set(codes.values()) <= {EXIT_PREEMPTED, None}, codes
    else:
        # Kubernetes signals the container's first process: the launcher passes the signal on and exits.
        assert codes == {0: EXIT_PREEMPTED, 1: EXIT_PREEMPTED}, (codes, log[-3000:])
        assert all(job.ended_s[rank] > job.launcher_ended_s for rank in range(2))
        assert "its launcher ended; this rank finishes its save first" in log


@pytest.mark.long
@pytest.mark.parametrize("under_timeout", [False, True], ids=["launcher-leads-its-group", "under-timeout"])
def test_after_a_failed_rank_the_others_end_at_once(tmp_path, under_timeout):
    job = run(tmp_path, "60", "60", lambda job: None, nproc=2, fail="1,0", under_timeout=under_timeout)
    log = job.log()
    assert "rank 0: failing" in log
    # Not a preemption: rank 1 does not spend its 60 s of grace waiting for a rank that is gone.
    assert job.ended_s[1] - job.launcher_ended_s < SLACK_S, (job.ended_s, job.launcher_ended_s)
    why = "its launcher ended: this rank ends at once" if under_timeout else "the launcher is stopping a failed job"
    assert why in log, log[-3000:]
    assert job.exit_codes()[1] in (-signal.SIGKILL, None)


@pytest.mark.parametrize("settings, error", [
    ({"signals": ["SIGTERN"]}, r"train.preemption.signals: 'SIGTERN' is not a signal name"),
    ({"signals": ["SIGKILL"]}, r"train.preemption.signals: SIGKILL cannot be caught"),
    ({"signals": ["SIGALRM"]}, r"train.preemption.signals: SIGALRM is the grace period's timer"),
    ({"grace_s": 0}, r"train.preemption.grace_s=0 must be a positive number of seconds"),
    ({"grace_s": "25"}, r"train.preemption.grace_s='25' must be a positive number of seconds"),
    ({"enabled": "yes"}, r"train.preemption.enabled='yes' must be true or false"),
])
def test_bad_settings_are_refused_naming_the_key(settings, error):
    with pytest.raises(ValueError, match=error):
        preemption_settings(OmegaConf.create({"train": {"preemption": settings}}))


def test_the_defaults_and_other_spellings():
    assert preemption_settings(OmegaConf.create({"train": {}})) == (True, (signal.SIGTERM, signal.SIGUSR1), 25.0)
    cfg = OmegaConf.create({"train": {"preemption": {"signals": ["usr2", 15], "grace_s": 40}}})
    assert preemption_settings(cfg) == (True, (signal.SIGUSR2, signal.SIGTERM), 40.0)
    assert preemption_settings(OmegaConf.create({"train": {"preemption": {"enabled": False}}}))[0] is False
