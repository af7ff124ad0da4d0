"""Evaluation on CPU ranks, the last incomplete batch included, gives the same top-1 on every layout.

The demo model is trained for two steps on one rank; its checkpoint is then evaluated
with ``--eval-only`` on the 1,437-image train split (odd, so data-parallel ranks need a
filler row, and 1,437 is no multiple of the batch) on 1 rank and on dp2 x pp2.
"""
import os
import re

import pytest

from libai_ext.testing import launch

pytestmark = pytest.mark.long  # the quick tier: the evaluation order in tests/test_global_order_layouts.py

EVAL_SPLIT = ["dataloader.test.0.dataset.train=True", "train.test_micro_batch_size=100"]


def train_net(repo_root, tmp_path, nproc, name, *args):
    argv = ["--config-file", os.path.join(repo_root, "configs", "demo_pipeline_cpu.py"), *args,
            f"dataloader.train.dataset.0.root.root={tmp_path}/data", f"train.output_dir={tmp_path}/{name}"]
    return launch(os.path.join(repo_root, "tools", "train_net.py"), nproc, argv, timeout=400,
                  workdir=str(tmp_path / f"{name}-logs"))


@pytest.fixture(scope="module")
def evaluations(repo_root, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("evaluation")
    train_net(repo_root, tmp, 1, "trained", "train.train_iter=2", "train.evaluation.enabled=False",
              "train.dist.pipeline_parallel_size=1")
    weights = f"train.load_weight={tmp}/trained/model_final"
    layouts = {"1rank": (1, ["train.dist.pipeline_parallel_size=1"]),
               "dp2-pp2": (4, ["train.dist.data_parallel_size=2"])}
    results = {}
    for name, (nproc, layout) in layouts.items():
        result = train_net(repo_root, tmp, nproc, name, "--eval-only", weights, *EVAL_SPLIT, *layout)
        log = result.log(0)
        results[name] = (float(re.findall(r"Acc@1=([0-9.]+)", log)[-1]),
                         int(re.findall(r"Total valid samples: (\d+)", log)[-1]))
    return results


def test_every_sample_is_evaluated_once(evaluations):
    assert {valid for _, valid in evaluations.values()} == {1437}


def test_layouts_agree_on_top1(evaluations):
    assert evaluations["1rank"][0] == pytest.approx(evaluations["dp2-pp2"][0], abs=1e-9)
