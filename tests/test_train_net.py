"""tools/train_net.py: the trainer swap runs both trainers; LiBai writes metrics.json on CPU ranks."""
import json
import os

import pytest

from conftest import assert_refused_without_hang
from libai_ext.engine.launch import resolve_trainer
from libai_ext.testing import launch

TINY_DEMO = ["train.train_iter=6", "train.log_period=2", "train.evaluation.eval_period=6",
             "train.test_micro_batch_size=90", "train.evaluation.eval_iter=2"]
TRAINERS = {"stock": "libai.engine.DefaultTrainer", "fixed": "libai_ext.ConsistentBatchTrainer"}


def train_net(repo_root, tmp_path, name, *overrides, check=True, stop_on_failure=True):
    output = tmp_path / name
    args = ["--config-file", os.path.join(repo_root, "configs", "demo_pipeline_cpu.py"),
            *TINY_DEMO, f"train.output_dir={output}", f"dataloader.train.dataset.0.root.root={tmp_path}/data",
            *overrides]
    return output, launch(os.path.join(repo_root, "tools", "train_net.py"), 2, args, timeout=300,
                          check=check, workdir=str(tmp_path / f"{name}-logs"), stop_on_failure=stop_on_failure)


@pytest.mark.parametrize("name", TRAINERS)
def test_trainer_swap_runs_and_writes_metrics(repo_root, tmp_path, name):
    output, _ = train_net(repo_root, tmp_path, name, f"train.trainer={TRAINERS[name]}")
    with open(output / "run_info.json") as f:
        info = json.load(f)
    assert info["trainer"].rsplit(".", 1)[1] == TRAINERS[name].rsplit(".", 1)[1]
    assert "Acc@1" in json.dumps(info["final_eval"])
    lines = (output / "metrics.json").read_text().splitlines()
    iterations = [json.loads(line)["iteration"] for line in lines]
    assert iterations and max(iterations) == 6  # LiBai logs iterations 1-based


def test_wrong_trainer_path_is_refused_on_every_rank(repo_root, tmp_path):
    _, result = train_net(repo_root, tmp_path, "bad", "train.trainer=libai.engine.NoSuchTrainer", check=False,
                          stop_on_failure=False)
    assert_refused_without_hang(result, "train.trainer='libai.engine.NoSuchTrainer' cannot be imported")


def test_resolve_trainer_rejects_non_trainers():
    with pytest.raises(TypeError, match="train.trainer"):
        resolve_trainer("collections.OrderedDict")
    assert resolve_trainer(None).__name__ == "ConsistentBatchTrainer"
