import json
import math
import os
import subprocess
import sys

import matplotlib  # noqa: F401  (a dev requirement: missing, the suite fails instead of skipping)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "tools", "compare_runs.py")


def write_metrics(run_dir, losses, accs, step_time, log_period=10, eval_period=50):
    """metrics.json as libai's JSONWriter writes it: one sorted-key JSON dict per line,
    eval scalars on the line of the iteration they were put at."""
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "metrics.json"), "w") as f:
        for i, loss in enumerate(losses):
            it = (i + 1) * log_period - 1
            rec = {"iteration": it, "total_loss": loss, "lr": 0.001, "data_time": 0.01, "time": step_time}
            if (it + 1) % eval_period == 0:
                rec["Acc@1"] = accs[(it + 1) // eval_period - 1]
                rec["Acc@5"] = 100.0
            f.write(json.dumps(rec, sort_keys=True) + "\n")


def run_tool(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, timeout=120)


def table_rows(md_text, header="| run | final loss"):
    """``{run: cells}`` of the table whose header starts with ``header``."""
    rows, inside = {}, False
    for line in md_text.splitlines():
        if line.startswith(header):
            inside = True
        elif inside and not line.startswith("|"):
            break
        elif inside and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows


def test_plot_and_table(tmp_path):
    runs = {
        "base": ([2.3 - 0.01 * i for i in range(20)], [20.0, 55.5, 48.25, 60.0], 0.5),
        "ours": ([2.3 - 0.02 * i for i in range(20)], [30.0, 71.75, 80.5, 79.0], 0.25),
    }
    for name, (losses, accs, t) in runs.items():
        write_metrics(str(tmp_path / name), losses, accs, t)
    # One run states its wall time; the other gets the estimate.
    (tmp_path / "ours" / "run_info.json").write_text(json.dumps({"wall_time_s": 123.4}))

    out = tmp_path / "docs" / "experiment"
    res = run_tool("--runs", *(f"{n}={tmp_path / n}" for n in runs), "--out", str(out), "--title", "t")
    assert res.returncode == 0, res.stderr

    png = out.with_suffix(".png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000

    rows = table_rows(out.with_suffix(".md").read_text())
    assert set(rows) == set(runs)
    for name, (losses, accs, t) in runs.items():
        tail = math.ceil(0.1 * len(losses))
        final_loss, best, final = rows[name][:3]
        assert final_loss == f"{sum(losses[-tail:]) / tail:.4f}"
        assert best == f"{max(accs):.2f}"
        assert final == f"{accs[-1]:.2f}"
    assert rows["ours"][3] == "123.4"
    assert rows["base"][3] == f"~{0.5 * 200:.1f}"  # 200 iterations at 0.5 s per step


def test_the_table_names_each_runs_trainer_and_what_stock_means(tmp_path):
    for name, trainer in (("stock", "libai.engine.default.DefaultTrainer"),
                          ("plugin", "libai_ext.engine.trainer.ConsistentBatchTrainer"), ("other", None)):
        write_metrics(str(tmp_path / name), [2.0, 1.5], [50.0], 0.1, eval_period=20)
        if trainer:
            (tmp_path / name / "run_info.json").write_text(json.dumps({"trainer": trainer, "wall_time_s": 1.0}))
    out = tmp_path / "out" / "table"
    res = run_tool("--runs", *(f"{n}={tmp_path / n}" for n in ("stock", "plugin", "other")), "--out", str(out))
    assert res.returncode == 0, res.stderr
    text = out.with_suffix(".md").read_text()
    folders = table_rows(text, header="| run | folder")
    assert {name: cells[1] for name, cells in folders.items()} == {
        "stock": "libai.engine.default.DefaultTrainer", "plugin": "libai_ext.engine.trainer.ConsistentBatchTrainer",
        "other": "unknown"}
    assert "Stock: LiBai's own DefaultTrainer, run through libai_ext's train_net" in text


def test_missing_metrics_names_folder(tmp_path):
    good = tmp_path / "good"
    write_metrics(str(good), [1.0] * 10, [50.0, 60.0], 0.1)
    empty = tmp_path / "empty_run"
    empty.mkdir()
    res = run_tool("--runs", f"a={good}", f"b={empty}", "--out", str(tmp_path / "x"))
    assert res.returncode != 0
    assert str(empty) in res.stderr and "metrics.json" in res.stderr
    missing = tmp_path / "nowhere"
    res = run_tool("--runs", f"a={missing}", "--out", str(tmp_path / "x"))
    assert res.returncode != 0 and str(missing) in res.stderr
    assert not (tmp_path / "x.png").exists()


def test_malformed_run_argument(tmp_path):
    res = run_tool("--runs", "just_a_path", "--out", str(tmp_path / "x"))
    assert res.returncode != 0 and "just_a_path" in res.stderr and "NAME=OUTPUT_DIR" in res.stderr


def write_raw_losses(run_dir, losses):
    with open(os.path.join(run_dir, "losses.jsonl"), "w") as f:
        for it, loss in enumerate(losses):
            f.write(json.dumps({"iteration": it, "total_loss": loss}) + "\n")


def test_reference_column_reports_the_raw_loss_difference(tmp_path):
    raw = {"one": [2.0, 1.5, 1.0, 0.5], "same": [2.0, 1.5, 1.0, 0.5], "apart": [2.0, 1.5, 1.1, 0.5]}
    for name, losses in raw.items():
        write_metrics(str(tmp_path / name), [2.0] * 10, [50.0, 60.0], 0.1)
        write_raw_losses(str(tmp_path / name), losses)
    out = tmp_path / "layouts"
    res = run_tool("--runs", *(f"{n}={tmp_path / n}" for n in raw), "--out", str(out), "--reference", "one")
    assert res.returncode == 0, res.stderr
    rows = {}
    for line in out.with_suffix(".md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[0] in raw:
            rows[cells[0]] = cells[5:]
    assert rows == {"one": ["0 (over 4 iterations)", "-"], "same": ["0 (over 4 iterations)", "-"],
                    "apart": [f"{0.1 / 1.0:.3g} (over 4 iterations)", "2"]}
    res = run_tool("--runs", f"one={tmp_path / 'one'}", "--out", str(out), "--reference", "nobody")
    assert res.returncode != 0 and "--reference 'nobody'" in res.stderr
