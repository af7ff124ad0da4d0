"""tools/train_net.py on a host made to look like a CUDA host: past LiBai's start-up on every rank, no hang.

``tests/fake_cuda/sitecustomize.py`` (on ``PYTHONPATH``) makes ``oneflow.cuda.is_available()``
return True in every process, which is what LiBai 0.1.1 asks to choose its CUDA paths.
There is still no device, so the job must die after start-up; what it dies of must be an
error that ends every rank, not a hang.  The same checks run on stock start-up (LiBai's
dataset-helper compile step put back), where rank 0 exits and rank 1 waits for it forever:
they must see that.
"""
import os

import pytest

from conftest import ROOT, rank_script
from libai_ext.engine.launch import SETUP_DONE
from libai_ext.testing import launch

FAKE_CUDA = os.path.join(ROOT, "tests", "fake_cuda")
PATCHED = "fake_cuda: oneflow.cuda.is_available patched to True"
STOCK_FAILURE = "Making C++ dataset helpers module failed"
NPROC = 2
TINY_DEMO = ["train.train_iter=6", "train.log_period=2", "train.evaluation.eval_period=6",
             "train.test_micro_batch_size=90", "train.evaluation.eval_iter=2"]


def train_net_on_fake_cuda(tmp_path, name, script, timeout):
    output = tmp_path / name
    pythonpath = [FAKE_CUDA, ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    args = ["--config-file", os.path.join(ROOT, "configs", "demo_pipeline_cpu.py"), *TINY_DEMO,
            f"train.output_dir={output}", f"dataloader.train.dataset.0.root.root={tmp_path}/data"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(pythonpath))
    result = launch(script, NPROC, args, timeout=timeout, env=env, check=False, stop_on_failure=False,
                    workdir=str(tmp_path / f"{name}-logs"))
    assert [r for r in range(NPROC) if PATCHED in result.log(r)] == list(range(NPROC)), \
        f"the fake CUDA host was not in effect on every rank; rank 0 log:\n{result.log(0)[-2000:]}"
    return output, result


def libai_log(output, rank):
    path = output / ("log.txt" if rank == 0 else f"log.txt.rank{rank}")
    return path.read_text(errors="replace") if path.exists() else ""


def startup_problems(output, result):
    """What keeps this job from passing LiBai's start-up on every rank and ending by itself."""
    problems = []
    stuck = [r for r in range(NPROC) if SETUP_DONE not in libai_log(output, r)]
    if stuck:
        problems.append(f"ranks {stuck} did not get past LiBai's start-up")
    if result.timed_out:
        problems.append(f"ranks {result.running_ranks()} still running after {result.wall_s:.0f} s: a hang")
    return problems


def test_fake_cuda_host_gets_past_libai_setup_and_no_rank_hangs(tmp_path):
    output, result = train_net_on_fake_cuda(tmp_path, "plugin", os.path.join(ROOT, "tools", "train_net.py"),
                                            timeout=300)
    assert startup_problems(output, result) == []
    # No GPU behind the fake: the job dies after start-up, with an error some rank printed.
    errors = [r for r in range(NPROC) if "Error" in result.log(r) or "Check failed" in result.log(r)]
    assert result.failed_ranks() and errors, f"no rank failed with an error; rank 0 log:\n{result.log(0)[-2000:]}"


@pytest.mark.long
def test_stock_startup_dies_on_the_fake_cuda_host_and_the_checks_see_it(tmp_path):
    output, result = train_net_on_fake_cuda(tmp_path, "stock", rank_script("train_net_stock_compile_step.py"),
                                            timeout=45)  # ranks 1+ hang for good: the timeout ends them
    assert STOCK_FAILURE in result.log(0)
    problems = startup_problems(output, result)
    assert len(problems) == 2, problems
    assert problems[0] == f"ranks {list(range(NPROC))} did not get past LiBai's start-up"
    assert "a hang" in problems[1]
