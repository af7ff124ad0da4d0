"""One live run per output folder: a second run into a folder that a live run owns is refused by every rank.

The owner here is a plain process holding the folder's lock as rank 0 of a run does
(``lock_output_dir``), so that it stays alive for exactly as long as the test wants.  The lock
is an ``flock``: when its owner dies, however it dies, the folder is free again.  Then a 2-rank
``tools/train_net.py`` into the owned folder: every rank stops with the error naming the folder,
the owner's host and process, before LiBai writes anything there (no ``config.yaml``, no log).
Stock LiBai has no such guard: both runs would write the same checkpoints and ``last_checkpoint``.
"""
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import ROOT
from demo_runs import digits, train_args, train_net
from libai_ext.lifetime.output_lock import LOCK_FILE, OutputDirInUse, lock_output_dir
from libai_ext.testing import launch

# The module alone (standard library only): the package libai_ext.engine would import OneFlow.
HOLD = "import importlib.util, sys, time; spec = importlib.util.spec_from_file_location('lock', sys.argv[2]); " \
       "lock = importlib.util.module_from_spec(spec); spec.loader.exec_module(lock); " \
       "lock.lock_output_dir(sys.argv[1]); print('held', flush=True); time.sleep(600)"


@pytest.fixture
def owned(tmp_path):
    """An output folder whose lock a live process holds; yields (folder, that process)."""
    folder = tmp_path / "run"
    module = os.path.join(ROOT, "libai_ext", "lifetime", "output_lock.py")
    owner = subprocess.Popen([sys.executable, "-c", HOLD, str(folder), module], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout.readline().strip() == "held"
        yield folder, owner
    finally:
        owner.kill()
        owner.wait()


def test_a_live_owner_is_named_and_a_dead_one_holds_nothing(owned):
    folder, owner = owned
    with pytest.raises(OutputDirInUse, match=rf"train.output_dir='{folder}' belongs to a live run: host "
                                             rf"{socket.gethostname()}, process {owner.pid} \(started .*\) holds "
                                             rf"{folder}/{LOCK_FILE}"):
        lock_output_dir(str(folder))
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    assert lock_output_dir(str(folder)) == str(folder / LOCK_FILE)
    assert lock_output_dir(str(folder)) == str(folder / LOCK_FILE)  # this process holds it: taken again at no cost
    assert f'"pid": {os.getpid()}' in (folder / LOCK_FILE).read_text()


def test_a_second_run_into_a_live_runs_folder_is_refused_by_every_rank(owned, repo_root, tmp_path, tmp_path_factory):
    folder, owner = owned
    started = time.monotonic()
    result = launch(train_net(repo_root), 2, train_args(repo_root, folder, digits(tmp_path_factory), "pp2", period=3),
                    timeout=300, check=False, workdir=str(tmp_path / "logs"))
    assert not result.timed_out and result.failed_ranks(), result.log(0)[-3000:]
    said = f"belongs to a live run: host {socket.gethostname()}, process {owner.pid}"
    assert result.ranks_logging(said) == [0, 1], (result.log(0)[-3000:], result.log(1)[-3000:])
    assert not result.ranks_logging("Starting training")
    assert sorted(os.listdir(folder)) == [LOCK_FILE], "LiBai wrote into the owned folder"
    assert owner.poll() is None and time.monotonic() - started < 300
