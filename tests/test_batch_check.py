"""The batch guard stops every rank on rank-dependent batches and stays quiet on consistent ones.

Stock LiBai differs per line: 0.1.1 has both halves of the bug; main takes every field from
stage 0 (LiBai #255) and its samplers follow the placement, so its batches are consistent and
the guard must let them through.
"""
import os

import pytest

from libai_ext.compat import libai_line, libai_main
from libai_ext.testing import launch

LIBAI_MAIN = libai_line() is libai_main

STOCK, FIXED = "libai.engine.DefaultTrainer", "libai_ext.ConsistentBatchTrainer"


def train(repo_root, tmp_path, trainer, scope, nproc=2, layout=()):
    output = tmp_path / "out"
    args = ["--config-file", os.path.join(repo_root, "configs", "demo_pipeline_cpu.py"),
            f"train.trainer={trainer}", f"train.seed_scope={scope}", "train.batch_check=every",
            "train.train_iter=2", "train.evaluation.enabled=False", f"train.output_dir={output}",
            f"dataloader.train.dataset.0.root.root={tmp_path}/data", *layout]
    return launch(os.path.join(repo_root, "tools", "train_net.py"), nproc, args, timeout=300, check=False,
                  stop_on_failure=False, workdir=str(tmp_path / "logs"))


@pytest.mark.skipif(LIBAI_MAIN, reason="LiBai main's stock get_batch takes every field from stage 0 (#255)")
def test_guard_stops_every_rank_on_stock_rank_dependent_augmentation(repo_root, tmp_path):
    result = train(repo_root, tmp_path, STOCK, "rank")
    assert not result.timed_out and result.failed_ranks()
    assert result.ranks_logging("BatchMismatchError") == [0, 1]
    log = result.log(1)
    assert "batch check failed at iteration 0 (DefaultTrainer)" in log
    assert "field 'images': ranks [1] disagree with rank 0" in log
    assert "ConsistentBatchTrainer" in log  # the fix is named


NOTHING_COMPARED = "nothing to compare"


@pytest.mark.parametrize("trainer, scope, nproc, layout", [
    # ConsistentBatchTrainer: one source rank per data-parallel group, so at dp2 the guard compares
    # the two groups' batches (they must differ); per-rank streams on every other rank change nothing.
    (FIXED, "rank", 4, ["train.dist.data_parallel_size=2", "train.stage0_only_loading=False"]),
    # Stock at dp=1 with identical seeds: both stages hold the same batch, compared rank 0 vs rank 1.
    pytest.param(STOCK, "global", 2, ["train.stage0_only_loading=False"], marks=pytest.mark.long),
], ids=["fixed-unseeded-dp2-pp2", "stock-seeded-dp1-pp2"])
def test_guard_is_quiet_on_consistent_batches(repo_root, tmp_path, trainer, scope, nproc, layout):
    result = train(repo_root, tmp_path, trainer, scope, nproc=nproc, layout=layout)
    assert result.failed_ranks() == [] and not result.timed_out, result.log(0)[-3000:]
    log = result.log(0)  # LiBai's logger writes on rank 0; the check itself is collective
    assert "batch check passed at iteration 0" in log and "batch check passed at iteration 1" in log, log[-3000:]
    assert NOTHING_COMPARED not in log, "the guard compared nothing"


@pytest.mark.long
def test_guard_says_it_has_nothing_to_compare_under_stage0_only_loading(repo_root, tmp_path):
    """Only stage 0 holds batches: the guard lets them through, says so, and training goes on."""
    result = train(repo_root, tmp_path, FIXED, "rank", layout=["train.stage0_only_loading=True"])
    assert result.failed_ranks() == [] and not result.timed_out, result.log(0)[-3000:]
    assert NOTHING_COMPARED in result.log(0)
    assert not result.ranks_logging("batch check passed")


def test_guard_judges_stock_data_parallel_pipeline_as_its_line_behaves(repo_root, tmp_path):
    """Stock dp2 x pp2 with identical seeds.

    0.1.1: the stage-0 shards read the same samples and the last stage's labels come from
    others; main: both shards distinct and every field from stage 0, so the guard compares the
    two stage-0 shards and lets them through.
    """
    result = train(repo_root, tmp_path, STOCK, "global", nproc=4, layout=["train.dist.data_parallel_size=2"])
    assert not result.timed_out
    if LIBAI_MAIN:
        assert result.failed_ranks() == [], result.log(0)[-3000:]
        assert "batch check passed at iteration 1" in result.log(0)
    else:
        assert result.ranks_logging("BatchMismatchError") == [0, 1, 2, 3]
        assert "disagree" in result.log(0) and "identical batches" in result.log(0)


def test_identical_shards_are_flagged_from_the_checksum_table():
    """The check that flags 0.1.1's sampler (real run above), on a synthetic checksum table.

    Groups 0 and 1 hold the same batch, group 2 another one.
    """
    import numpy as np

    from libai_ext.engine.batch_check import find_mismatches

    table = np.array([[[16, 1.0, 2.0, 3.0]], [[16, 1.0, 2.0, 3.0]], [[16, 5.0, 6.0, 7.0]]])
    problems = find_mismatches(table, ["images"], {0: [0], 1: [1], 2: [2]})
    assert len(problems) == 1 and "groups 0 and 1 hold identical batches (ranks 0 and 1)" in problems[0]


def check_batch_tool(repo_root, tmp_path, trainer, scope, nproc, layout):
    args = ["--config-file", os.path.join(repo_root, "configs", "demo_pipeline_cpu.py"), "--num-batches", 2,
            f"train.trainer={trainer}", f"train.seed_scope={scope}", f"train.output_dir={tmp_path}/out",
            f"dataloader.train.dataset.0.root.root={tmp_path}/data", *layout]
    return launch(os.path.join(repo_root, "tools", "check_batch.py"), nproc, args, timeout=300, check=False,
                  stop_on_failure=False, workdir=str(tmp_path / "logs"))


@pytest.mark.parametrize("trainer, scope, nproc, layout, images_bad", [
    (STOCK, "rank", 2, [], None if LIBAI_MAIN else "[1]"),  # main: every field from stage 0
    # the sampler half of the bug (LiBai 0.1.1 only: main reads the placement's shard)
    pytest.param(STOCK, "global", 4, ["train.dist.data_parallel_size=2"], None if LIBAI_MAIN else "[2, 3]",
                 marks=pytest.mark.long),
    pytest.param(STOCK, "global", 2, [], None, marks=pytest.mark.long),
], ids=["stock-unseeded-dp1-pp2", "stock-seeded-dp2-pp2", "stock-seeded-dp1-pp2"])
def test_check_batch_tool_exit_codes(repo_root, tmp_path, trainer, scope, nproc, layout, images_bad):
    """Each case compares ranks of one data-parallel group (the tool's table is within groups; under
    ConsistentBatchTrainer a group has a single source rank, so the tool has nothing to compare there)."""
    code = 1 if images_bad else 0
    result = check_batch_tool(repo_root, tmp_path, trainer, scope, nproc, layout)
    assert not result.timed_out and result.ended_with(code), (result.returncodes, result.log(0)[-3000:])
    assert result.ranks_logging("batch check " + ("failed" if code else "passed")) == list(range(nproc))
    rows = field_rows(result.log(0))
    assert sorted(rows) == ["images", "labels"], result.log(0)[-3000:]
    verdicts = {name: line.split()[2] for name, line in rows.items()}
    if images_bad:
        assert verdicts["images"] == "disagree" and f" {images_bad} " in rows["images"], rows
    else:
        assert set(verdicts.values()) == {"agree"}, rows


def field_rows(log):
    """{field: its table line} from the tool's table (the lines after its header)."""
    lines = log.splitlines()
    header = max(i for i, line in enumerate(lines) if line.startswith("field ") and "placement_idx" in line)
    rows = {}
    for line in lines[header + 1:]:
        cells = line.split()
        if len(cells) < 4 or cells[2] not in ("agree", "disagree"):
            break
        rows[cells[0]] = line
    return rows
