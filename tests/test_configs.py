"""configs/swin_cifar100.py and configs/swin_digits_cpu.py: they load, their layouts are consistent,
the CPU Swin runs forward on one rank and trains as a 2-stage pipeline through tools/train_net.py."""
import json
import os

import pytest
from libai.config import LazyConfig

from libai_ext.testing import launch

CONFIGS = ("swin_cifar100", "swin_digits_cpu")


def load(repo_root, name):
    return LazyConfig.load(os.path.join(repo_root, "configs", f"{name}.py"))


@pytest.mark.parametrize("name", CONFIGS)
def test_config_loads_with_trainer_and_pipeline_layers(repo_root, name):
    cfg = load(repo_root, name)
    assert cfg.train.trainer == "libai_ext.ConsistentBatchTrainer"
    # SwinTransformer gives block i the pipeline layer index i: anything else unbalances the stages.
    assert cfg.train.dist.pipeline_num_layers == sum(cfg.model.depths)
    assert cfg.dataloader.train.mixup_func.label_smoothing > 0  # soft labels: what stock LiBai mismatches
    assert cfg.train.train_micro_batch_size % 2 == 0  # batch mixup needs pairs


def test_cifar100_layout_fits_its_model(repo_root):
    cfg = load(repo_root, "swin_cifar100")
    d = cfg.train.dist
    assert (d.data_parallel_size, d.tensor_parallel_size, d.pipeline_parallel_size) == (2, 2, 2)
    assert cfg.train.seed_scope == "data_parallel"
    assert cfg.model.num_classes == cfg.dataloader.train.mixup_func.num_classes == 100
    assert cfg.dataloader.train.dataset[0].root == "./data/cifar100"
    for stage, heads in enumerate(cfg.model.num_heads):
        assert heads % d.tensor_parallel_size == 0, f"stage {stage}: heads cannot be split over tp"
        assert (cfg.model.embed_dim * 2 ** stage) % heads == 0
    # Each merge halves the token map; it must stay divisible by the window until the last stage.
    side = cfg.model.img_size // cfg.model.patch_size
    for _ in cfg.model.depths[:-1]:
        assert side % cfg.model.window_size == 0 and side % 2 == 0
        side //= 2


def test_cifar100_missing_data_is_a_clear_error(tmp_path):
    from libai_ext.data import CIFAR100Folder

    with pytest.raises(FileNotFoundError, match="cifar-100-python"):
        CIFAR100Folder(root=str(tmp_path / "cifar100"), train=True)


def build_on_one_rank(cfg):
    """The config's model on this process, as LiBai's single-rank layout (no launcher needed)."""
    from libai.config import instantiate
    from libai.utils import distributed as dist
    from omegaconf import DictConfig

    import libai_ext

    libai_ext.apply_cpu_patches()
    dist.setup_dist_util(DictConfig({"data_parallel_size": 1, "tensor_parallel_size": 1,
                                     "pipeline_parallel_size": 1,
                                     "pipeline_num_layers": cfg.train.dist.pipeline_num_layers}))
    return instantiate(cfg.model)


def test_cifar100_model_builds(repo_root):
    model = build_on_one_rank(load(repo_root, "swin_cifar100"))  # ~2 s: 27.6 M parameters
    assert sum(len(layer.blocks) for layer in model.layers) == 12


def test_digits_model_forward_on_one_rank(repo_root):
    import oneflow as flow
    from libai.utils import distributed as dist

    cfg = load(repo_root, "swin_digits_cpu")
    model = build_on_one_rank(cfg)
    placement = dist.get_layer_placement(0)
    images = flow.randn(4, 3, 32, 32).to_global(placement=placement, sbp=flow.sbp.broadcast)
    model.eval()
    with flow.no_grad():
        scores = model(images)["prediction_scores"]
    assert tuple(scores.shape) == (4, cfg.model.num_classes)
    model.train()
    soft = flow.full((4, cfg.model.num_classes), 1.0 / cfg.model.num_classes).to_global(
        placement=placement, sbp=flow.sbp.broadcast)
    assert flow.isfinite(model(images, soft)["losses"]).all().item()


@pytest.mark.long  # the digits configs train in the quick tier's equivalence tests
def test_digits_pipeline_smoke_run(repo_root, tmp_path):
    """2 ranks, pp2, a few steps through tools/train_net.py: metrics.json and run_info.json appear."""
    output = tmp_path / "out"
    args = ["--config-file", os.path.join(repo_root, "configs", "swin_digits_cpu.py"),
            "train.dist.pipeline_parallel_size=2", "train.train_iter=4", "train.log_period=2",
            "train.evaluation.eval_period=4", "train.evaluation.eval_iter=2",
            f"train.output_dir={output}", f"dataloader.train.dataset.0.root.root={tmp_path}/data",
            f"dataloader.test.0.dataset.root.root={tmp_path}/data"]
    launch(os.path.join(repo_root, "tools", "train_net.py"), 2, args, timeout=300, workdir=str(tmp_path / "logs"))
    assert (output / "metrics.json").is_file()
    info = json.loads((output / "run_info.json").read_text())
    assert info["trainer"].endswith("ConsistentBatchTrainer")
    assert "Acc@1" in info["final_eval"]
