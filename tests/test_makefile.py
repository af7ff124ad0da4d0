"""The Makefile: `make setup` explains what is missing instead of failing obscurely, pins LiBai main by
commit, and names no target it lacks."""
import os
import re
import shutil
import subprocess
import tarfile


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


LIBAI_MAIN_GIT = "git+https://github.com/Oneflow-Inc/libai.git@9dcbe3b281c98ba9a3bd192495bef42570095336"


def make_variable(folder, name, *args, cache=None):
    """The value ``make`` gives ``name`` in ``folder``'s Makefile (with ``args``), ``cache`` as the user's
    cache folder (default: one that does not exist, so no archive a download left is found)."""
    env = dict(os.environ, XDG_CACHE_HOME=str(cache or os.path.join(str(folder), "no-cache")))
    out = subprocess.run(["make", "--no-print-directory", "-C", str(folder), "--eval", "print-%: ; @echo $($*)",
                          f"print-{name}", *args], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_libai_main_is_pinned_by_commit_and_an_archive_is_used_only_when_given(repo_root, tmp_path):
    """A checkout without a LiBai main archive beside it (a user's) installs LiBai main from its git URL at
    the tested commit; one is used when given, or where this project's CI keeps one (offline)."""
    shutil.copy(os.path.join(repo_root, "Makefile"), tmp_path)  # a checkout with nothing beside it
    assert make_variable(tmp_path, "LIBAI", "VENV=.venv-libai-main") == LIBAI_MAIN_GIT
    assert make_variable(tmp_path, "LIBAI", "VENV=.venv-libai-main", "LIBAI_MAIN_ARCHIVE=/x/libai.tar.gz") == \
        "/x/libai.tar.gz"
    assert make_variable(tmp_path, "LIBAI") == "libai==0.1.1"
    vendored = os.path.join(repo_root, "..", "shared", "vendor", "libai-main-9dcbe3b.tar.gz")
    if os.path.isfile(vendored):  # CI's copy of shared/ beside the clone: no network needed
        assert make_variable(repo_root, "LIBAI", "VENV=.venv-libai-main") == os.path.relpath(vendored, repo_root)
        with tarfile.open(vendored) as archive:  # the archive is that commit (git archive records it)
            assert archive.pax_headers.get("comment") == LIBAI_MAIN_GIT.rpartition("@")[2]


def test_an_archive_beside_the_checkout_a_clone_came_from_or_in_the_cache_is_used(repo_root, tmp_path):
    """A clone of a local checkout (``git clone . "$(mktemp -d)"``) finds the archive beside that checkout; a
    folder with none finds the copy libai_ext's text-data builder downloaded into the cache."""
    project, vendor = tmp_path / "work" / "project", tmp_path / "work" / "shared" / "vendor"
    vendor.mkdir(parents=True)
    (vendor / "libai-main-9dcbe3b.tar.gz").write_bytes(b"")
    clone = tmp_path / "elsewhere"
    for folder in (project, clone):
        subprocess.run(["git", "init", "-q", str(folder)], check=True)
        shutil.copy(os.path.join(repo_root, "Makefile"), folder)
    subprocess.run(["git", "-C", str(clone), "remote", "add", "origin", str(project)], check=True)
    assert make_variable(clone, "LIBAI", "VENV=.venv-libai-main") == \
        f"{project}/../shared/vendor/libai-main-9dcbe3b.tar.gz"
    cache = tmp_path / "cache"
    (cache / "libai_ext").mkdir(parents=True)
    (cache / "libai_ext" / "libai-main-9dcbe3b.tar.gz").write_bytes(b"")
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(os.path.join(repo_root, "Makefile"), alone)
    assert make_variable(alone, "LIBAI", "VENV=.venv-libai-main", cache=cache) == \
        f"{cache}/libai_ext/libai-main-9dcbe3b.tar.gz"
    assert make_variable(alone, "LIBAI", "VENV=.venv-libai-main") == LIBAI_MAIN_GIT


def test_every_phony_target_has_a_rule(repo_root):
    with open(os.path.join(repo_root, "Makefile")) as f:
        text = f.read()
    phony = {name for line in re.findall(r"^\.PHONY:(.*)$", text, re.M) for name in line.split()}
    rules = {name for names in re.findall(r"^([A-Za-z0-9_.-][A-Za-z0-9_. -]*?)\s*:(?!=)", text, re.M)
             for name in names.split()}
    assert {"setup", "demo", "test", "test-all", "test-libai-main"} <= phony
    assert phony - rules == set()
