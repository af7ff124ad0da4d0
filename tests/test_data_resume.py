"""Resume under ``tools/train_net.py`` with loader workers, and with another global batch.

The demo config on dp2 (global batch 32, 16 per rank), two loader workers per rank, augmentation and
mixup on, 6 iterations, a checkpoint after iteration 2.  Its train dataset logs what it reads
(tests/configs/demo_read_log.py).

* Exact resume with ``num_workers > 0`` on 2 ranks: resumed from that checkpoint (as if killed right
  after it), the run repeats the uninterrupted run's losses, iteration by iteration.
* Elastic resume: the same checkpoint resumed on 1 rank with a global batch of 24 reads the samples
  right after the 96 the checkpoint had consumed (LiBai would restart at 3 x 24 = 72: 24 repeated).
* With LiBai's own sampler (``train.randomness="fast"``) that resume is refused, naming the keys.

The last two are in the long tier (a launch each; test_data_position.py covers their rules in process).
"""
import os
import shutil

import pytest

from conftest import assert_refused_without_hang
from libai_ext.data import DIGITS_TRAIN_SIZE
from libai_ext.random import epoch_order
from libai_ext.testing import launch, raw_losses_by_run, read_raw_losses

K, ITERS, SEED = 3, 6, 7  # checkpoint after iteration K - 1
GLOBAL_BATCH, ELASTIC_BATCH = 32, 24


def train_net(repo_root, output, nproc, *args, check=True):
    argv = ["--config-file", os.path.join(repo_root, "tests", "configs", "demo_read_log.py"), *args,
            f"dataloader.train.dataset.0.root.root={output.parent / 'digits'}", f"train.output_dir={output}",
            f"dataloader.train.dataset.0.read_log={output}/reads", f"train.seed={SEED}",
            "train.dist.pipeline_parallel_size=1", f"train.dist.data_parallel_size={nproc}",
            f"train.checkpointer.period={K}", "train.evaluation.enabled=False", "train.log_period=1"]
    return launch(os.path.join(repo_root, "tools", "train_net.py"), nproc, argv, timeout=400, check=check,
                  workdir=f"{output}-logs-{len(os.listdir(output.parent))}")


def resume_copy(full, name):
    """A copy of the full run's folder as a kill right after the checkpoint of iteration K - 1 leaves it."""
    copy = full.parent / name
    shutil.copytree(full, copy, ignore=shutil.ignore_patterns("reads.*"))
    (copy / "last_checkpoint").write_text(f"model_{K - 1:07d}")
    return copy


def reads(output, rank=0):
    """The indices the rank read, each once, in the order first read (keyed augmentation's check by effect reads a
    sampled item a second time on the first batches)."""
    with open(output / f"reads.rank{rank}") as f:
        return list(dict.fromkeys(int(line) for line in f))


@pytest.fixture(scope="module")
def full(repo_root, tmp_path_factory):
    output = tmp_path_factory.mktemp("data_resume") / "full"
    output.mkdir()
    train_net(repo_root, output, 2, f"train.train_iter={ITERS}", f"train.train_micro_batch_size={GLOBAL_BATCH // 2}",
              "dataloader.train.num_workers=2")
    return output


def test_resume_with_workers_on_two_ranks_repeats_the_losses(repo_root, full):
    resumed = resume_copy(full, "resumed")
    train_net(repo_root, resumed, 2, "--resume", f"train.train_iter={ITERS}",
              f"train.train_micro_batch_size={GLOBAL_BATCH // 2}", "dataloader.train.num_workers=2")
    uninterrupted, tail = read_raw_losses(full), raw_losses_by_run(resumed)[-1]
    assert [r["iteration"] for r in tail] == list(range(K, ITERS))
    assert [r["total_loss"] for r in tail] == [r["total_loss"] for r in uninterrupted[K:]]


@pytest.mark.long
def test_another_global_batch_continues_at_the_next_sample(repo_root, full):
    elastic = resume_copy(full, "elastic")
    result = train_net(repo_root, elastic, 1, "--resume", f"train.train_iter={K + 2}",
                       f"train.train_micro_batch_size={ELASTIC_BATCH}", "dataloader.train.num_workers=0")
    order = epoch_order(SEED, 0, DIGITS_TRAIN_SIZE)
    consumed = K * GLOBAL_BATCH
    assert reads(elastic) == order(range(consumed, consumed + 2 * ELASTIC_BATCH)).tolist()
    # The full run trained on that order too (its workers also read ahead: a superset).
    assert set(order(range(ITERS * GLOBAL_BATCH)).tolist()) <= set(reads(full, 0) + reads(full, 1))
    assert "data position restored from the checkpoint" in result.log(0)


@pytest.mark.long
def test_libai_sampler_refuses_another_global_batch(repo_root, full):
    refused = resume_copy(full, "refused")
    result = train_net(repo_root, refused, 1, "--resume", f"train.train_iter={K + 2}", "train.randomness=fast",
                       f"train.train_micro_batch_size={ELASTIC_BATCH}", "dataloader.train.num_workers=0", check=False)
    assert_refused_without_hang(result, "train.global_batch_size (train.train_micro_batch_size x data parallel size",
                                started="Starting training from iteration")
