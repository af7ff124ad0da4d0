"""--resume with a larger train.train_iter continues a finished run exactly.

A run of K iterations ends with ``last_checkpoint`` = ``model_final``.  Resumed with
``train.train_iter=2K`` it must repeat an uninterrupted 2K-iteration run's per-iteration
losses (the learning rate is constant, ``train.scheduler.alpha=1``, so that the two runs'
schedules agree: a resumed run keeps the finished run's saved schedule).  Stock LiBai
cannot resume a finished run at all: 0.1.1 crashes on ``int('final')``, main refuses.
pp2 on 2 CPU ranks, real digits, augmentation and mixup on; both endings LiBai leaves
(``model_final``, and ``model_best`` when the final evaluation was the best).
"""
import os

import pytest

from libai_ext.testing import launch, read_raw_losses

pytestmark = pytest.mark.long  # a documented edge case (docs/resume.md), not one of the README's guarantees

K = 3
# LiBai 0.1.1 and main on model_best, 0.1.1 on model_final / LiBai main on model_final.
STOCK_REFUSALS = ("invalid literal for int() with base 10: '", "model training has finished")
# Evaluation off: the run ends tagged model_final.  On: the final evaluation is the best so far,
# so LiBai tags model_best last (saved after model_final, same iteration).
ENDINGS = {"model_final": ["train.evaluation.enabled=False"], "model_best": []}


def run(repo_root, output, data, iters, *flags, trainer="libai_ext.ConsistentBatchTrainer", check=True):
    args = ["--config-file", os.path.join(repo_root, "configs", "demo_pipeline_cpu.py"), *flags,
            f"train.trainer={trainer}", f"train.output_dir={output}", f"dataloader.train.dataset.0.root.root={data}",
            f"train.train_iter={iters}", "train.warmup_ratio=0", "train.scheduler.alpha=1.0",
            f"train.evaluation.eval_period={K}", "train.evaluation.eval_iter=2", "train.test_micro_batch_size=90",
            "train.log_period=1"]
    logs = len([p for p in os.listdir(os.path.dirname(output)) if "-logs-" in p])
    return launch(os.path.join(repo_root, "tools", "train_net.py"), 2, args, timeout=300,
                  workdir=f"{output}-logs-{logs}", check=check)


def losses(output):
    return read_raw_losses(output)


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("finished")


@pytest.fixture(scope="module")
def uninterrupted(repo_root, tmp):
    # Evaluation runs inside a saved and restored random state: it does not change training's losses.
    run(repo_root, tmp / "uninterrupted", tmp / "data", 2 * K, "train.evaluation.enabled=False")
    return losses(tmp / "uninterrupted")


@pytest.fixture(scope="module", params=ENDINGS)
def finished(request, repo_root, tmp):
    ending, output, data = request.param, tmp / request.param, tmp / "data"
    run(repo_root, output, data, K, *ENDINGS[ending])
    assert (output / "last_checkpoint").read_text() == ending
    refusals = {}
    if ending == "model_final":
        refusals["stock"] = run(repo_root, output, data, 2 * K, "--resume", *ENDINGS[ending],
                                trainer="libai.engine.DefaultTrainer", check=False)
        refusals["too_short"] = run(repo_root, output, data, K, "--resume", *ENDINGS[ending], check=False)
    run(repo_root, output, data, 2 * K, "--resume", *ENDINGS[ending])
    return ending, output, losses(output), refusals


def test_continued_run_repeats_the_uninterrupted_losses(finished, uninterrupted):
    ending, output, continued, _ = finished
    assert [r["iteration"] for r in continued] == list(range(2 * K))
    assert [r["iteration"] for r in uninterrupted] == list(range(2 * K))
    assert [r["total_loss"] for r in continued] == [r["total_loss"] for r in uninterrupted]
    assert (output / f"model_{K - 1:07d}").is_dir()  # the first run's last checkpoint, by number
    assert (output / "model_final").is_dir()  # the continued run's


@pytest.mark.parametrize("finished", ["model_final"], indirect=True)
def test_stock_libai_cannot_continue_a_finished_run(finished):
    stock = finished[3]["stock"]
    assert stock.failed_ranks() and not stock.timed_out
    assert any(stock.ranks_logging(message) for message in STOCK_REFUSALS), stock.log(0)[-2000:]


@pytest.mark.parametrize("finished", ["model_final"], indirect=True)
def test_resume_without_more_iterations_is_refused_by_name(finished):
    result = finished[3]["too_short"]
    assert result.failed_ranks() and not result.timed_out
    assert result.ranks_logging(f"train.train_iter={K}: the run in"), result.log(0)[-2000:]
    assert result.ranks_logging(f"already trained up to iteration {K - 1}"), result.log(0)[-2000:]
