"""tools/gpu_check.py (``make gpu-check``): refuses without a GPU; its checks run, and can fail, on CPU ranks."""
import os
import subprocess
import sys

import pytest

from conftest import ROOT, load_tool


gpu_check = load_tool("gpu_check")


def test_refuses_clearly_where_oneflow_sees_no_gpu():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gpu_check.py")], env=env,
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == gpu_check.NO_GPU_EXIT == 2
    assert "gpu-check refused: OneFlow sees no CUDA device" in out.stderr
    assert "Nothing was run" in out.stderr and "| check |" not in out.stdout


def test_checks_planned_per_gpu_count():
    assert [(name, ranks) for name, ranks, _ in gpu_check.planned_checks(1)] == [
        ("masks", 1), ("resume", 1), ("generators", 1)]
    assert [(name, ranks) for name, ranks, _ in gpu_check.planned_checks(8)] == [
        ("masks", 1), ("resume", 1), ("generators", 2), ("pairing", 2), ("guard", 2)]


def test_bitwise_comparison_sees_one_flipped_bit():
    import numpy as np

    a = np.linspace(0, 1, 50, dtype=np.float32)
    b = a.copy()
    assert gpu_check.identical_bits(a, b)
    b.view(np.uint32)[17] ^= 1
    assert not gpu_check.identical_bits(a, b)
    assert not gpu_check.identical_bits(a, a.astype(np.float64))


def test_a_failing_check_is_a_failed_row_and_exit_code_1(monkeypatch, tmp_path, capsys):
    def broken(device, workdir):
        raise gpu_check.CheckFailed("masks differ")

    monkeypatch.setattr(gpu_check, "planned_checks", lambda gpus: [("masks", 1, broken)])
    assert gpu_check.main(["--device", "cpu", "--workdir", str(tmp_path)]) == 1
    assert "| masks | 1 | FAIL | CheckFailed: masks differ |" in capsys.readouterr().out


@pytest.mark.long
def test_every_check_passes_on_cpu_ranks(tmp_path):
    """The same check functions as on GPUs, on CPU ranks (masks against CPU itself: the code path only)."""
    rows = gpu_check.run_checks("cpu", 2, str(tmp_path))
    assert [row[0] for row in rows] == ["masks", "resume", "generators", "pairing", "guard"]
    failed = [row for row in rows if not row[2]]
    assert failed == [], gpu_check.format_table(rows, "cpu")
