"""configs/swin_cifar100.py (LiBai's Swin CIFAR-100 recipe at (dp, tp, pp) = (2, 2, 2)) and
configs/demo_swin_digits_cpu.py (a CPU demo of this project's own Swin): they load, the recipe is
LiBai's own (read against LiBai main's config files, from its source archive), LiBai's Swin-T builds
and trains one iteration of the recipe on 8 CPU ranks, the demo Swin runs forward on one rank and
trains as a 2-stage pipeline through tools/train_net.py."""
import inspect
import json
import os

import pytest
from libai.config import LazyConfig
from omegaconf import OmegaConf

from libai_ext.testing import launch

CONFIGS = ("swin_cifar100", "demo_swin_digits_cpu")


def load(repo_root, name):
    return LazyConfig.load(os.path.join(repo_root, "configs", f"{name}.py"))


@pytest.mark.parametrize("name", CONFIGS)
def test_config_loads_with_trainer_and_pipeline_layers(repo_root, name):
    cfg = load(repo_root, name)
    assert cfg.train.trainer == "libai_ext.ConsistentBatchTrainer"
    # SwinTransformer gives block i the pipeline layer index i: anything else unbalances the stages.
    assert cfg.train.dist.pipeline_num_layers == sum(cfg.model.depths)
    mixup = cfg.dataloader.train.mixup_func
    smoothing = mixup.get("label_smoothing", inspect.signature(mixup._target_).parameters["label_smoothing"].default)
    assert smoothing > 0  # soft labels: what stock LiBai mismatches
    assert cfg.train.train_micro_batch_size % 2 == 0  # batch mixup needs pairs


def calls(compose):
    """``[(class, {argument: value})]`` of a ``LazyCall(transforms.Compose)``, interpolations resolved."""
    return [(t["_target_"], {k: tuple(v) if isinstance(v, list) else v for k, v in t.items() if k != "_target_"})
            for t in compose["transforms"]]


def square(size):
    return tuple(size) if isinstance(size, (list, tuple)) else (size, size)


def test_cifar100_recipe_is_libais_own(repo_root, libai_main_configs):
    """Model, augmentation, mixup, loss, optimizer and schedule as LiBai main's configs/swin_cifar100.py
    (with configs/common/models/swin/swin_tiny_patch4_window7_224.py and configs/common/data/cifar100.py)
    sets them; only the layout, the global batch's split and the dataset reader differ."""
    from libai.models import SwinTransformer

    ours, libais = load(repo_root, "swin_cifar100"), LazyConfig.load(os.path.join(libai_main_configs,
                                                                                  "swin_cifar100.py"))
    assert ours.model._target_ is SwinTransformer is libais.model._target_
    model = OmegaConf.to_container(ours.model, resolve=True)
    for key, value in libais.model.cfg.items():
        if key != "loss_func":
            assert model[key] == value, key
    assert (model["img_size"], model["patch_size"], model["window_size"]) == (224, 4, 7)  # Swin-T
    assert type(libais.model.cfg.loss_func) is ours.model.loss_func._target_  # flowvision's soft-target loss
    resolved = OmegaConf.to_container(ours.dataloader, resolve=True)
    for split, theirs in (("train", libais.dataloader.train.dataset[0].transform),
                          ("test", libais.dataloader.test[0].dataset.transform)):
        mine = resolved["train"]["dataset"][0]["transform"] if split == "train" else resolved["test"][0]["dataset"][
            "transform"]
        theirs = calls(OmegaConf.to_container(theirs))
        mine = calls(mine)
        assert [c for c, _ in mine] == [c for c, _ in theirs], split
        for (cls, a), (_, b) in zip(mine, theirs):
            if "size" in a and cls.__name__ != "Resize":
                a, b = {**a, "size": square(a["size"])}, {**b, "size": square(b["size"])}
            assert a == b, (split, cls.__name__)
    assert [c.__name__ for c, _ in calls(resolved["train"]["dataset"][0]["transform"])][0] == "RandomResizedCrop"
    mixup = {k: v for k, v in ours.dataloader.train.mixup_func.items()}
    assert mixup == {k: v for k, v in libais.dataloader.train.mixup_func.items()}
    for key in ("lr", "eps", "weight_decay"):
        assert ours.optim[key] == libais.optim[key], key
    assert ours.optim.params.clip_grad_max_norm is None is libais.optim.params.clip_grad_max_norm
    for key in ("train_epoch", "warmup_ratio", "test_micro_batch_size", "log_period"):
        assert ours.train[key] == libais.train[key], key
    assert ours.train.scheduler == libais.train.scheduler
    assert ours.train.evaluation.eval_period == libais.train.evaluation.eval_period
    assert ours.graph.enabled is False is libais.graph.enabled and not ours.train.amp.enabled
    d, theirs = ours.train.dist, libais.train.dist
    global_batch = ours.train.train_micro_batch_size * d.data_parallel_size
    assert global_batch == libais.train.train_micro_batch_size * theirs.data_parallel_size == 256
    assert (d.data_parallel_size, d.tensor_parallel_size, d.pipeline_parallel_size) == (2, 2, 2)
    assert d.pipeline_num_layers == theirs.pipeline_num_layers == 12
    assert ours.dataloader.train.dataset[0].root == "./data/cifar100"


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

    libai_ext.apply_patches()
    dist.setup_dist_util(DictConfig({"data_parallel_size": 1, "tensor_parallel_size": 1,
                                     "pipeline_parallel_size": 1,
                                     "pipeline_num_layers": cfg.train.dist.pipeline_num_layers}))
    return instantiate(cfg.model)


@pytest.mark.long  # ~10-20 s of initialisation; the quick tier reads the recipe against LiBai's
def test_cifar100_model_is_libais_swin_t(repo_root):
    from libai.models import SwinTransformer

    model = build_on_one_rank(load(repo_root, "swin_cifar100"))  # a few seconds: Swin-T, 100 classes
    assert type(model) is SwinTransformer
    assert sum(len(layer.blocks) for layer in model.layers) == 12
    assert 27e6 < sum(p.numel() for p in model.parameters()) < 29e6


# The recipe at CPU size, by override only: 32 px (CIFAR's own size; window 2 then tiles the 8, 4, 2 and
# 1-token maps of patch 4, as window 7 tiles 224 px's 56, 28, 14 and 7), embed 24 (head dim 8), 4 images
# per step, one iteration, no evaluation. The model code, the augmentation and mixup are the recipe's.
RECIPE_AT_CPU_SIZE = ["model.img_size=32", "model.window_size=2", "model.embed_dim=24",
                      "train.train_micro_batch_size=2", "train.train_epoch=0", "train.train_iter=1",
                      "train.log_period=1", "train.evaluation.enabled=False", "dataloader.train.num_workers=0",
                      "dataloader.test.0.num_workers=0"]


@pytest.mark.long
def test_cifar100_recipe_trains_one_iteration_on_8_cpu_ranks(repo_root, tmp_path):
    """LiBai's Swin-T recipe at (2, 2, 2) through tools/train_net.py.  The images are real but not CIFAR-100
    (which cannot be downloaded here): scikit-learn's handwritten digits in CIFAR-100's file format
    (``ensure_digits_cifar``, 10 of the 100 classes), read by the recipe's own dataset class."""
    from libai_ext.data import ensure_digits_cifar

    data, output = ensure_digits_cifar(str(tmp_path / "cifar100")), tmp_path / "out"
    args = ["--config-file", os.path.join(repo_root, "configs", "swin_cifar100.py"), *RECIPE_AT_CPU_SIZE,
            f"dataloader.train.dataset.0.root={data}", f"dataloader.test.0.dataset.root={data}",
            f"train.output_dir={output}"]
    result = launch(os.path.join(repo_root, "tools", "train_net.py"), 8, args, timeout=900,
                    workdir=str(tmp_path / "logs"))
    assert not result.failed_ranks(), result.log(0)[-3000:]
    info = json.loads((output / "run_info.json").read_text())
    assert info["trainer"].endswith("ConsistentBatchTrainer")
    losses = [json.loads(line) for line in (output / "losses.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in losses] == [0] and 0 < losses[0]["total_loss"] < 10, losses
    stages = result.ranks_logging("stochastic layers under libai_ext's streams")
    assert stages, result.log(0)[-3000:]


def test_digits_model_forward_on_one_rank(repo_root):
    import oneflow as flow
    from libai.utils import distributed as dist

    cfg = load(repo_root, "demo_swin_digits_cpu")
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
    args = ["--config-file", os.path.join(repo_root, "configs", "demo_swin_digits_cpu.py"),
            "train.dist.pipeline_parallel_size=2", "train.train_iter=4", "train.log_period=2",
            "train.evaluation.eval_period=4", "train.evaluation.eval_iter=2",
            f"train.output_dir={output}", f"dataloader.train.dataset.0.root.root={tmp_path}/data",
            f"dataloader.test.0.dataset.root.root={tmp_path}/data"]
    launch(os.path.join(repo_root, "tools", "train_net.py"), 2, args, timeout=300, workdir=str(tmp_path / "logs"))
    assert (output / "metrics.json").is_file()
    info = json.loads((output / "run_info.json").read_text())
    assert info["trainer"].endswith("ConsistentBatchTrainer")
    assert "Acc@1" in info["final_eval"]
