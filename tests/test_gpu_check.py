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
        ("masks", 1), ("keyed op", 1), ("simulation", 1), ("mask cost", 1), ("graph step", 1), ("resume", 1),
        ("generators", 1)]
    assert [(name, ranks) for name, ranks, _ in gpu_check.planned_checks(8)] == [
        ("masks", 1), ("keyed op", 1), ("simulation", 1), ("mask cost", 1), ("graph step", 1), ("resume", 1), ("generators", 2),
        ("pairing", 2),
        ("guard", 2)]


def test_simulation_row_on_cpu_and_its_failure(monkeypatch):
    assert "draw sites on 16 simulated ranks equal the 1-rank draw" in gpu_check.check_simulation("cpu")
    from libai_ext.random import global_index
    real = global_index._strides
    monkeypatch.setattr(global_index, "_strides", lambda shape: [s + 1 for s in real(shape)])
    with pytest.raises(gpu_check.CheckFailed, match="MISMATCH"):
        gpu_check.check_simulation("cpu")


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
    assert [row[0] for row in rows] == [name for name, _, _ in gpu_check.CHECKS]  # every row, in its order
    failed = [row for row in rows if not row[2]]
    assert failed == [], gpu_check.format_table(rows, "cpu")


def test_cost_targets_fail_a_gpu_row(monkeypatch):
    """On GPUs a ratio over its target is a failed row (stand-in measurements: the arithmetic of the row)."""
    mask_cost = gpu_check.checkout_module("mask_cost")
    monkeypatch.setattr(mask_cost, "kernel_exists", lambda dtype, device: dtype == "float32")
    monkeypatch.setattr(mask_cost, "kept_values_agree", lambda dtype, device: (True, 10))
    monkeypatch.setattr(mask_cost, "time_variants", lambda sizes, dtype, device, repeats: (
        {(sizes[0], "oneflow"): [1.0], (sizes[0], "int ops"): [1.6]}, {}))
    monkeypatch.setattr(mask_cost, "memory_in_fresh_processes", lambda sizes, dtype, device, repeats, variants: {
        (sizes[0], v): [{"peak": 80.0, "held": 80.0}] for v in variants})
    with pytest.raises(gpu_check.CheckFailed, match=r"float32 failed: .*time 1.60x.*over \['time'\]"):
        gpu_check.check_mask_cost("cuda")
    assert "time 1.60x" in gpu_check.check_mask_cost("cpu")


def test_graph_step_row_fails_over_its_target_on_gpus_only(monkeypatch, tmp_path):
    """The graph-step row's arithmetic (stand-in step times: each launched run is one call of ``run``):
    the plugin's median step over stock's, a failed row over 1.05x on GPUs, a report on CPU ranks."""
    overhead = gpu_check.checkout_module("trainer_overhead")
    launched = []

    def fake_run(model, nproc, variant, iters, *args, graph, device, **kwargs):
        launched.append((model, nproc, variant, graph, device))
        step = {"stock": 1.0, "layout_invariant": 1.2}[variant]
        warmup = gpu_check.COST_SIZES[device]["step_warmup"]
        return [{"step_times": [9.0] * warmup + [step] * (iters - warmup)}]

    monkeypatch.setattr(overhead, "run", fake_run)
    with pytest.raises(gpu_check.CheckFailed, match=r"over 1.05x: .*1.200x"):
        gpu_check.check_graph_step("cuda", str(tmp_path))
    assert sorted(launched) == sorted([("gpt2", 1, v, True, "cuda") for v in ("stock", "layout_invariant")] * 2)
    assert "1.200x (CPU ranks: no target applies)" in gpu_check.check_graph_step("cpu", str(tmp_path))
