"""The multi-rank harness reports a failing rank, and a hang, within its timeout; its ranks start
OneFlow only once rank 0's bootstrap server listens."""
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import rank_script
from libai_ext.testing import MultiRankError, launch
from libai_ext.testing.multirank import free_port
from libai_ext.testing.rank_wrapper import wait_for_master


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


@pytest.mark.parametrize("codes, code, ends", [
    ({0: 0, 1: 0}, 0, True), ({0: 0, 1: None}, 0, False),
    ({0: None, 1: 1}, 1, True), ({0: 1, 1: 1}, 1, True),  # the launcher may end rank 0 before it exits
    ({0: 0, 1: 1}, 1, False), ({0: None, 1: None}, 1, False), ({0: 2, 1: None}, 1, False),
])
def test_ended_with_allows_the_ranks_the_launcher_terminated(codes, code, ends):
    from libai_ext.testing.multirank import LaunchResult

    result = LaunchResult(command=["x"], nproc=len(codes), workdir="/nonexistent", returncodes=codes)
    assert result.ended_with(code) is ends


def _timed_wait(env, workdir, timeout_s=5.0):
    start = time.monotonic()
    wait_for_master(env, str(workdir), timeout_s=timeout_s)
    return time.monotonic() - start


def test_rank_waits_until_the_master_port_listens(tmp_path):
    port = free_port()
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def listen_late():
        time.sleep(0.5)
        server.bind(("127.0.0.1", port))
        server.listen()

    thread = threading.Thread(target=listen_late)
    thread.start()
    try:
        waited = _timed_wait({"RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}, tmp_path)
    finally:
        thread.join()
        server.close()
    assert 0.5 <= waited < 2.0, waited


def test_rank_wait_ends_with_rank0_at_its_limit_and_never_on_rank0(tmp_path):
    env = {"RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}  # nothing listens
    assert 0.3 <= _timed_wait(env, tmp_path, timeout_s=0.3) < 1.5
    assert _timed_wait(dict(env, RANK="0"), tmp_path) < 0.1
    assert _timed_wait({"RANK": "1"}, tmp_path) < 0.1  # no master port: not launched by OneFlow
    (tmp_path / "rank0.exit").write_text("1")  # rank 0 ended before it listened
    assert _timed_wait(env, tmp_path) < 0.5


def test_libai_ext_train_waits_for_rank0_before_it_imports_oneflow(repo_root):
    """``make demo`` and the preemption tests launch ``tools/train_net.py`` with no rank wrapper: the tool waits
    itself, before the import that bootstraps the job (a fresh process: this one has imported OneFlow)."""
    probe = ("import sys\n"
             "import libai_ext.cli.train_net as tool\n"
             "tool.wait_for_rank0_bootstrap = lambda: sys.exit(8 if 'oneflow' in sys.modules else 7)\n"
             "tool.main(['--config-file', 'configs/demo_pipeline_cpu.py'])\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=repo_root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 7, done.stderr
