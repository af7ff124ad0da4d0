"""tp2 follows 1 rank step for step when both start from one checkpoint (``train.load_weight``).

Stock LiBai's random initial weights depend on the layout (OneFlow's global random draws differ
between 1 rank and tp2; tests/test_param_init.py covers the plugin's seeded init), so layouts are
compared from one shared set of initial weights.  Stock
LiBai 0.1.1 ignores ``train.load_weight`` unless ``--resume`` is given: each layout then
trains from its own random init and tp2 differs from 1 rank from iteration 0 (see
docs/upstream-bugs.md §16).  Augmentation, mixup/cutmix, dropout, attention dropout and
drop-path are on; the data are the real digits through LiBai's loader.
"""
import os

import pytest

from libai_ext.testing import launch, read_raw_losses

ITERS = 4
TRAINERS = {"fixed": "libai_ext.ConsistentBatchTrainer", "stock": "libai.engine.DefaultTrainer"}
LAYOUTS = {"1rank": (1, []), "tp2": (2, ["train.dist.tensor_parallel_size=2"])}
RTOL = 1e-5


def train_net(repo_root, tmp, nproc, name, *args):
    argv = ["--config-file", os.path.join(repo_root, "configs", "demo_swin_digits_cpu.py"), *args,
            f"dataloader.train.dataset.0.root.root={tmp}/data", f"train.output_dir={tmp}/{name}",
            "train.evaluation.enabled=False", "train.log_period=1"]
    launch(os.path.join(repo_root, "tools", "train_net.py"), nproc, argv, timeout=400,
           workdir=str(tmp / f"{name}-logs"))
    return os.path.join(tmp, name)


def raw_losses(output):
    return [record["total_loss"] for record in read_raw_losses(output)]


@pytest.fixture(scope="module")
def losses(repo_root, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shared-weights")
    initial = train_net(repo_root, tmp, 1, "initial", "train.train_iter=1")
    common = [f"train.load_weight={initial}/model_final", f"train.train_iter={ITERS}",
              "model.drop_rate=0.1", "model.attn_drop_rate=0.1", "model.drop_path_rate=0.2"]
    runs = {}
    for trainer_name, trainer in TRAINERS.items():
        for layout, (nproc, flags) in LAYOUTS.items():
            output = train_net(repo_root, tmp, nproc, f"{trainer_name}-{layout}", f"train.trainer={trainer}",
                               *common, *flags)
            runs[trainer_name, layout] = raw_losses(output)
    return runs


def max_relative_difference(a, b):
    assert len(a) == len(b) == ITERS, (a, b)
    return max(abs(x - y) / abs(x) for x, y in zip(a, b))


@pytest.mark.long
def test_tp2_follows_one_rank_from_shared_weights(losses):
    diff = max_relative_difference(losses["fixed", "1rank"], losses["fixed", "tp2"])
    assert diff <= RTOL, f"1 rank {losses['fixed', '1rank']} vs tp2 {losses['fixed', 'tp2']}"


@pytest.mark.long
def test_stock_ignores_load_weight_and_diverges(losses):
    diff = max_relative_difference(losses["stock", "1rank"], losses["stock", "tp2"])
    assert diff > 100 * RTOL, "stock LiBai matched: the test cannot see the bug"
    # Stock trained from its own random init, not from the shared weights the plugin loaded.
    assert losses["stock", "1rank"][0] != losses["fixed", "1rank"][0]
