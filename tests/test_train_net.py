"""tools/train_net.py: the trainer swap runs both trainers; LiBai writes metrics.json on CPU ranks."""
import json
import os

import pytest

from conftest import assert_refused_without_hang
from libai_ext.compat import libai_line, libai_main
from libai_ext.engine.launch import resolve_trainer
from libai_ext.testing import launch

LIBAI_MAIN = libai_line() is libai_main
# What the keys test checks is LiBai main's: the quick tier runs it there (make test-libai-main), the long tier on 0.1.1.
QUICK_ON_LIBAI_MAIN = (lambda test: test) if LIBAI_MAIN else pytest.mark.long

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


@pytest.fixture(scope="module")
def old_config_run(repo_root, tmp_path_factory):
    """The plugin's trainer on a config written for LiBai 0.1.1 (no rdma_enabled, input_placement_device,
    dist.device_type): ``(output, result)``.  Both tests of the plugin's run read it (one launch)."""
    tmp_path = tmp_path_factory.mktemp("old-config")
    config = tmp_path / "config_0_1.py"
    config.write_text(
        "from libai.config import LazyConfig\n"
        f"_demo = LazyConfig.load({os.path.join(repo_root, 'configs', 'demo_pipeline_cpu.py')!r})\n"
        "model, dataloader, optim, graph, train = _demo.model, _demo.dataloader, _demo.optim, _demo.graph, _demo.train\n"
        "for _key in ('rdma_enabled', 'input_placement_device'):\n"
        "    train.pop(_key)\n"
        "train.dist.pop('device_type')\n")
    output = tmp_path / "old-config"
    args = ["--config-file", str(config), *TINY_DEMO, f"train.output_dir={output}",
            f"dataloader.train.dataset.0.root.root={tmp_path}/data", f"train.trainer={TRAINERS['fixed']}"]
    return output, launch(os.path.join(repo_root, "tools", "train_net.py"), 2, args, timeout=300,
                          workdir=str(tmp_path / "old-config-logs"))


@pytest.mark.parametrize("name", TRAINERS)
def test_trainer_swap_runs_and_writes_metrics(repo_root, tmp_path, request, name):
    """The plugin's run is the one on the config without LiBai main's keys (``old_config_run``)."""
    if name == "fixed":
        output, _ = request.getfixturevalue("old_config_run")
    else:
        output, _ = train_net(repo_root, tmp_path, name, f"train.trainer={TRAINERS[name]}")
    with open(output / "run_info.json") as f:
        info = json.load(f)
    assert info["trainer"].rsplit(".", 1)[1] == TRAINERS[name].rsplit(".", 1)[1]
    assert ("stock" in info) == (name == "stock")  # what "stock" means: LiBai's trainer through this train_net
    assert "Acc@1" in json.dumps(info["final_eval"])
    lines = (output / "metrics.json").read_text().splitlines()
    iterations = [json.loads(line)["iteration"] for line in lines]
    # LiBai 0.1.1 logs iterations 1-based (last: 6); main's metrics.json counts from 0 (last: 5).
    assert iterations and max(iterations) == (5 if LIBAI_MAIN else 6)


@QUICK_ON_LIBAI_MAIN
def test_a_config_without_libai_main_keys_still_trains(old_config_run):
    """On main those keys are filled (RDMA off, inputs and layers on the host's device kind) and logged; on 0.1.1
    nothing is added."""
    output, result = old_config_run
    assert (output / "run_info.json").exists()
    filled = result.ranks_logging("config keys missing for LiBai main")
    assert filled == ([0, 1] if LIBAI_MAIN else []), result.log(0)[-2000:]


def test_wrong_trainer_path_is_refused_on_every_rank(repo_root, tmp_path):
    _, result = train_net(repo_root, tmp_path, "bad", "train.trainer=libai.engine.NoSuchTrainer", check=False,
                          stop_on_failure=False)
    assert_refused_without_hang(result, "train.trainer='libai.engine.NoSuchTrainer' cannot be imported")


def test_resolve_trainer_rejects_non_trainers():
    with pytest.raises(TypeError, match="train.trainer"):
        resolve_trainer("collections.OrderedDict")
    assert resolve_trainer(None).__name__ == "ConsistentBatchTrainer"
