"""`make setup` explains what is missing instead of failing obscurely."""
import subprocess


def test_setup_without_python310_says_what_to_install(repo_root, tmp_path):
    out = subprocess.run(["make", "-C", repo_root, "setup", f"VENV={tmp_path}/venv", "PYTHON310=/bin/false"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "Python 3.10 is required" in out.stderr and "pyenv install 3.10" in out.stderr


def test_second_setup_is_a_no_op(repo_root):
    out = subprocess.run(["make", "-C", repo_root, "-q", "setup"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, "make setup would run again on a ready venv"


def test_demo_runs_to_the_end_and_prints_accuracy(repo_root, tmp_path):
    """`make demo`, shortened: 2 ranks, the pipeline config, evaluation and the summary line."""
    overrides = (f"train.train_iter=4 train.evaluation.eval_period=4 train.evaluation.eval_iter=2 "
                 f"train.test_micro_batch_size=90 dataloader.train.dataset.0.root.root={tmp_path}/data")
    out = subprocess.run(["make", "-C", repo_root, "demo", f"DEMO_OUTPUT={tmp_path}/demo", f"DEMO_ARGS={overrides}"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "ConsistentBatchTrainer: " in out.stdout and "final evaluation {'Acc@1':" in out.stdout
