"""A user's own LiBai config: each of LiBai main's own configs (from its source archive, as shipped) with
only the trainer line and ``train.seed`` changed, as docs/usage.md walks through for gpt2_pretrain.py.

Besides those two lines, each run sets only what CPU ranks need (``train.rdma_enabled=False``,
``train.input_placement_device="cpu"``, ``train.dist.device_type="cpu"``, the stack notes' facts, and
``train.amp.enabled=False``: OneFlow 0.9.0's AMP converts CUDA ops only, which the plugin refuses by
name), where the data live (this machine has none of LiBai's files), and sizes: width, depth, sequence
and image size, micro batch, one rank (roberta_pretrain.py asks for dp 8), one iteration, evaluation off.
LiBai's graph objects (``graph.enabled=True`` with ``libai.models.utils.GraphBase``, from LiBai's
``configs/common/models/graph.py``), its fused kernels, its vocabulary padding and its samplers stay as
the configs set them.

Data: the text configs read real English text that LiBai's own preprocess tool indexed (the session's
``libai_text_data``: GPT-2's BPE, a WordPiece vocabulary, RoBERTa's BPE files); the ImageNet configs
read scikit-learn's real handwritten digits written in ImageNet's folder layout
(``ensure_digits_imagenet``, 10 of the 1,000 classes) by LiBai's own ``ImageNetDataset``.  Not run:
``swin_cifar100.py`` and ``swinv2_cifar100.py``, whose LiBai ``CIFAR100Dataset`` (flowvision's) downloads
CIFAR-100 and checks each file's md5 against the official archive: there is no network here, and no
other data passes the check.  Those two are loaded and checked as the others.

The quick tier loads every config and checks it as the plugin's launcher does; the long tier trains
the nine with data for one iteration each, one after another in one 1-rank launch.
"""
import json
import math
import os

import pytest

from conftest import rank_script, records_of_every_rank
from libai_ext.compat import detect, libai_main
from libai_ext.data import ensure_digits_imagenet
from libai_ext.data.text_data import FILES
from libai_ext.testing import launch

pytestmark = pytest.mark.skipif(detect.libai_line() is not libai_main,
                                reason="LiBai main's own configs: written for LiBai main (0.1.1 lacks its API)")

USER_CHANGE = ["train.trainer=libai_ext.ConsistentBatchTrainer", "train.seed=1234"]
CPU = ["train.rdma_enabled=False", "train.input_placement_device=cpu", "train.dist.device_type=cpu",
       "train.amp.enabled=False"]
ONE_ITERATION = ["train.train_iter=1", "train.train_epoch=0", "train.log_period=1",
                 "train.evaluation.enabled=False", "dataloader.train.num_workers=0"]
NO_DATA = {"swin_cifar100": "LiBai's CIFAR100Dataset downloads CIFAR-100 and checks its md5: no network here",
           "swinv2_cifar100": "LiBai's CIFAR100Dataset downloads CIFAR-100 and checks its md5: no network here"}


def text_paths(tokenizer_files, prefix, test=True):
    """Where a text config's tokenizer files and indexed dataset are (``{T}``: the text data root)."""
    paths = [f"tokenization.tokenizer.{key}={{T}}/{FILES[name]}" for key, name in tokenizer_files.items()]
    for where in ["dataloader.train.dataset.0"] + (["dataloader.test.0.dataset"] if test else []):
        paths += [f"{where}.data_prefix={{T}}/{FILES[prefix]}", f"{where}.indexed_dataset.data_prefix={{T}}/{FILES[prefix]}"]
    return paths


def text_sizes(layers, max_positions, seq=64, **extra):
    sizes = [f"model.cfg.hidden_size=64", "model.cfg.num_attention_heads=4", f"model.cfg.hidden_layers={layers}",
             "train.train_micro_batch_size=2"]
    sizes += [f"model.cfg.{k}={v}" for k, v in {"max_position_embeddings": max_positions, **extra}.items()]
    sizes += [f"{where}.max_seq_length={seq}" for where in ("dataloader.train.dataset.0", "dataloader.test.0.dataset")]
    return sizes + [f"train.dist.pipeline_num_layers={layers}"]


def image_sizes(model, crop=32):
    """``model``: the model's own size keys; ``crop``: the training crop (LiBai's RandomResizedCrop, first)."""
    return [f"model.cfg.{k}={v}" for k, v in model.items()] + [
        f"dataloader.train.dataset.0.transform.transforms.0.size={crop}", "train.train_micro_batch_size=2"]


IMAGENET_ROOT = ["dataloader.train.dataset.0.root={I}", "dataloader.test.0.dataset.root={I}"]
SWIN = dict(img_size=32, window_size=2, embed_dim=24)  # 8, 4, 2, 1 tokens a side: window 2 tiles them
# SwinV2 at 64 px (16, 8, 4, 2 tokens a side): a 1-token window divides its relative coordinates by
# window - 1 = 0, a NaN from the first step.
SWINV2 = dict(SWIN, img_size=64)

# Per config: what it reads and its reduced size (nothing else).
RUNS = {
    "gpt2_pretrain": text_paths({"vocab_file": "gpt2_vocab", "merges_file": "gpt2_merges"}, "gpt2_prefix")
    + [s for s in text_sizes(2, None, ffn_hidden_size=256, max_seq_length=64) if "max_position" not in s],
    "bert_large_pretrain": text_paths({"vocab_file": "bert_vocab"}, "bert_prefix")
    + text_sizes(2, 64, intermediate_size=256),
    "bert_classification": text_paths({"vocab_file": "bert_vocab"}, "bert_prefix")
    + text_sizes(2, 64, intermediate_size=256),
    "t5_large_pretrain": text_paths({"vocab_file": "bert_vocab"}, "bert_prefix")
    + text_sizes(2, 64, intermediate_size=256)[:-1]
    + ["train.dist.pipeline_num_layers=4", "dataloader.train.dataset.0.max_seq_length_dec=32",
       "dataloader.test.0.dataset.max_seq_length_dec=32"],
    "roberta_pretrain": text_paths({"vocab_file": "roberta_vocab", "merges_file": "roberta_merges"}, "roberta_prefix")
    + text_sizes(2, 66, intermediate_size=256) + ["train.dist.data_parallel_size=1"],
    "vit_imagenet": IMAGENET_ROOT + image_sizes(dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4))
    + ["train.dist.pipeline_num_layers=2"],
    "swin_imagenet": IMAGENET_ROOT + image_sizes(SWIN),
    "swinv2_imagenet": IMAGENET_ROOT + image_sizes(SWINV2, crop=64),
    "resmlp_imagenet": IMAGENET_ROOT + image_sizes(dict(img_size=32, patch_size=8, embed_dim=64, depth=2))
    + ["train.dist.pipeline_num_layers=2"],
}
CONFIGS = sorted(RUNS) + sorted(NO_DATA)


def overrides(name, text_root, imagenet_root):
    return USER_CHANGE + CPU + ONE_ITERATION + [o.format(T=text_root, I=imagenet_root) for o in RUNS.get(name, [])]


def load(config_dir, name, opts):
    from libai.config import LazyConfig

    return LazyConfig.apply_overrides(LazyConfig.load(os.path.join(config_dir, f"{name}.py")), opts)


def test_every_config_of_libai_main_is_here(libai_main_configs):
    shipped = sorted(f[:-3] for f in os.listdir(libai_main_configs) if f.endswith(".py"))
    assert shipped == sorted(CONFIGS)


@pytest.mark.parametrize("name", CONFIGS)
def test_the_plugin_accepts_libais_config_with_one_line_changed(libai_main_configs, name):
    """As the launcher checks a config before any rank talks to another: the trainer resolves to the plugin's,
    and LiBai's graph settings (LiBai's own GraphBase where the config enables graph mode) pass."""
    from libai.models.utils import GraphBase

    from libai_ext import ConsistentBatchTrainer
    from libai_ext.engine.launch import check_config

    cfg = load(libai_main_configs, name, overrides(name, "T", "I"))
    assert check_config(cfg) is ConsistentBatchTrainer
    assert cfg.graph.train_graph._target_ is GraphBase  # LiBai's, as its configs/common/models/graph.py sets it
    assert cfg.graph.enabled == (name not in ("swin_cifar100", "swinv2_cifar100", "swinv2_imagenet"))


@pytest.mark.parametrize("name", [n for n in sorted(RUNS) if "tokenizer" in str(RUNS[n])])
def test_libais_tokenizer_set_up_sizes_the_vocabulary_to_hold_every_token(libai_main_configs, libai_text_data, name):
    """The vocabulary LiBai pads (``make_vocab_size_divisible_by`` x tp) holds every token the tokenizer can
    give, T5's special tokens included (libai_ext.compat.special_tokens)."""
    import libai_ext
    from libai_ext import ConsistentBatchTrainer

    libai_ext.apply_patches()
    cfg = load(libai_main_configs, name, overrides(name, libai_text_data, "I"))
    tokenizer = ConsistentBatchTrainer.build_tokenizer(cfg)
    size = cfg.model.cfg.vocab_size
    assert len(tokenizer) <= size and size % cfg.tokenization.make_vocab_size_divisible_by == 0, (len(tokenizer), size)
    assert max(tokenizer.get_vocab().values()) < size


@pytest.mark.long
def test_libais_configs_train_one_iteration_with_the_plugin(libai_main_configs, libai_text_data, tmp_path):
    imagenet = ensure_digits_imagenet(str(tmp_path / "imagenet"))
    plan = [{"name": name, "config_file": os.path.join(libai_main_configs, f"{name}.py"),
             "overrides": overrides(name, libai_text_data, imagenet)} for name in sorted(RUNS)]
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    result = launch(rank_script("libai_zoo_configs.py"), 1, ["--plan", str(tmp_path / "plan.json"), "--out",
                    str(tmp_path / "out")], timeout=1500, workdir=str(tmp_path / "logs"))
    records = {r["config"]: r for r in records_of_every_rank(result, count=len(RUNS))[0]}
    log = result.log(0)
    # Not the bare word "frozen": LiBai logs each config's source, and swinv2_imagenet.py says "# frozen weights".
    assert "traced outside" not in log and "draw is frozen" not in log and "UnkeyedGraphDraw" not in log, \
        "a graph drew one mask for every step"
    for name, record in records.items():
        assert record["trainer"] == "ConsistentBatchTrainer", name
        assert len(record["losses"]) == 1 and math.isfinite(record["losses"][0]), (name, record)
        assert record["unconverted"] == [], name
        assert record["sampler"].startswith("libai_ext."), (name, record["sampler"])  # the layout-invariant order
        if "graph" in name or record["graph"]:
            assert record["graph"] is not None, name
