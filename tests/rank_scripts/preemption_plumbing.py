"""A rank that trains nothing: ``PreemptionWatcher``'s signals with OneFlow's real launcher, without OneFlow.

    python -m oneflow.distributed.launch --nproc_per_node N preemption_plumbing.py OUT SAVE_S GRACE_S [FAIL]

Each argument after OUT is a comma-separated list, one value per rank (or one for every rank).
Each rank arms a watcher (train.preemption's defaults but ``GRACE_S``), writes ``OUT/armed.<rank>``,
then "trains" (short sleeps) until the watcher reports a request; it then "saves" for ``SAVE_S``
seconds, commits, and exits as a preempted rank does (``EXIT_PREEMPTED``).  A rank with FAIL=1
exits with 1 right after arming (a failed rank).  A rank with GRACE_S=0 does without the watcher,
as a plain signal handler would: ``die_with_launcher()`` and a Python handler that only notes the
signal.  Every event goes to stdout with the rank.

Importing OneFlow in every rank would bootstrap OneFlow's environment: ``libai_ext.lifetime`` imports none of it.
"""
import os
import signal
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from libai_ext.lifetime.launcher import die_with_launcher  # noqa: E402
from libai_ext.lifetime.preemption_signals import EXIT_PREEMPTED, PreemptionWatcher  # noqa: E402

assert "oneflow" not in sys.modules, "libai_ext.lifetime imported OneFlow"


class PlainHandler:
    """What a training loop without the watcher does: note the signal, save at the end of the step."""

    def __init__(self):
        self.requested, self.signal_name, self.launcher = False, None, die_with_launcher()
        self._echo_expected = None
        signal.signal(signal.SIGTERM, self.note)

    def note(self, signum, frame):
        self.requested, self.signal_name = True, signal.Signals(signum).name

    def agree_stop(self):
        pass

    def commit(self, checkpoint):
        pass


def per_rank(text, rank, cast):
    values = text.split(",")
    return cast(values[rank] if len(values) > 1 else values[0])


def main(out, save_s, grace_s, fail="0"):
    rank = int(os.environ["RANK"])
    grace = per_rank(grace_s, rank, float)
    watcher = PreemptionWatcher(grace_s=grace).arm() if grace else PlainHandler()
    print(f"rank {rank}: armed, launcher {watcher.launcher}, echo expected {watcher._echo_expected}", flush=True)
    with open(os.path.join(out, f"armed.{rank}"), "w") as f:
        f.write(str(os.getpid()))
    if per_rank(fail, rank, int):
        print(f"rank {rank}: failing", flush=True)
        sys.exit(1)
    while not watcher.requested:
        time.sleep(0.05)
    print(f"rank {rank}: request seen ({watcher.signal_name}): saving", flush=True)
    watcher.agree_stop()
    time.sleep(per_rank(save_s, rank, float))
    watcher.commit("checkpoint")
    print(f"rank {rank}: committed", flush=True)
    os._exit(EXIT_PREEMPTED)


if __name__ == "__main__":
    main(*sys.argv[1:])
