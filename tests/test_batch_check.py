"""The batch guard stops every rank on rank-dependent batches and stays quiet on consistent ones."""
import os

import pytest

from libai_ext.testing import launch

STOCK, FIXED = "libai.engine.DefaultTrainer", "libai_ext.ConsistentBatchTrainer"


def train(repo_root, tmp_path, trainer, scope, nproc=2, layout=()):
    output = tmp_path / "out"
    args = ["--config-file", os.path.join(repo_root, "configs", "demo_pipeline_cpu.py"),
            f"train.trainer={trainer}", f"train.seed_scope={scope}", "train.batch_check=every",
            "train.train_iter=2", "train.evaluation.enabled=False", f"train.output_dir={output}",
            f"dataloader.train.dataset.0.root.root={tmp_path}/data", *layout]
    return launch(os.path.join(repo_root, "tools", "train_net.py"), nproc, args, timeout=300, check=False,
                  stop_on_failure=False, workdir=str(tmp_path / "logs"))


def test_guard_stops_every_rank_on_stock_rank_dependent_augmentation(repo_root, tmp_path):
    result = train(repo_root, tmp_path, STOCK, "rank")
    assert not result.timed_out and result.failed_ranks()
    assert result.ranks_logging("BatchMismatchError") == [0, 1]
    log = result.log(1)
    assert "batch check failed at iteration 0 (DefaultTrainer)" in log
    assert "field 'images': ranks [1] disagree with rank 0" in log
    assert "ConsistentBatchTrainer" in log  # the fix is named


@pytest.mark.parametrize("trainer, scope, extra, expected", [
    (FIXED, "rank", "train.stage0_only_loading=False", "batch check passed at iteration 1"),
    (FIXED, "rank", "train.stage0_only_loading=True", "stage-0-only loading, only stage 0 holds batches"),
    (STOCK, "global", "train.stage0_only_loading=False", "batch check passed at iteration 1"),
], ids=["fixed-unseeded", "fixed-stage0-only", "stock-seeded-dp1"])
def test_guard_is_quiet_on_consistent_batches(repo_root, tmp_path, trainer, scope, extra, expected):
    result = train(repo_root, tmp_path, trainer, scope, layout=[extra])
    assert result.failed_ranks() == [] and not result.timed_out, result.log(0)[-3000:]
    assert expected in result.log(0)


def test_guard_catches_the_sampler_bug_under_data_parallel_pipeline(repo_root, tmp_path):
    """Stock dp2 x pp2 with identical seeds: ranks of one data-parallel group read other samples."""
    result = train(repo_root, tmp_path, STOCK, "global", nproc=4, layout=["train.dist.data_parallel_size=2"])
    assert not result.timed_out and result.ranks_logging("BatchMismatchError") == [0, 1, 2, 3]
    assert "disagree" in result.log(0) and "identical batches" in result.log(0)


def check_batch_tool(repo_root, tmp_path, trainer, scope):
    args = ["--config-file", os.path.join(repo_root, "configs", "demo_pipeline_cpu.py"), "--num-batches", 2,
            f"train.trainer={trainer}", f"train.seed_scope={scope}", f"train.output_dir={tmp_path}/out",
            f"dataloader.train.dataset.0.root.root={tmp_path}/data"]
    return launch(os.path.join(repo_root, "tools", "check_batch.py"), 2, args, timeout=300, check=False,
                  stop_on_failure=False, workdir=str(tmp_path / "logs"))


@pytest.mark.parametrize("trainer, scope, code", [(STOCK, "rank", 1), (FIXED, "rank", 0), (STOCK, "global", 0)],
                         ids=["stock-unseeded", "fixed-unseeded", "stock-seeded-dp1"])
def test_check_batch_tool_exit_codes(repo_root, tmp_path, trainer, scope, code):
    result = check_batch_tool(repo_root, tmp_path, trainer, scope)
    assert not result.timed_out and result.returncodes[0] == code, result.log(0)[-3000:]
    assert result.ranks_logging("batch check " + ("failed" if code else "passed")) == [0, 1]
    table = result.log(0)
    assert "images" in table and "labels" in table
    if code:
        assert "disagree" in table and "[1]" in table
