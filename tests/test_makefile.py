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
