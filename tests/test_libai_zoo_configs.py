"""configs/libai_*_cpu.py: LiBai's own models (GPT-2, BERT, T5, ViT, Swin; on LiBai main also
RoBERTa, SwinV2, ResMLP), every dropout and drop-path on, train with ConsistentBatchTrainer from the
seed alone, on the installed LiBai line.

One launch trains all the line's configs one after another in one process (tests/rank_scripts/
libai_zoo_configs.py, through tools/train_net.py's own set-up).  The text data come from the
session's ``libai_text_data`` build.
"""
import math
import os

import pytest
from libai.config import LazyConfig

from conftest import ROOT, ZOO_TEXT, records_of_every_rank, rank_script, zoo_configs
from libai_ext.testing import launch

CONFIGS = zoo_configs()
# The largest rate of each kind of stochastic layer in each model: every dropout and drop-path on
# (drop-path rises linearly over the blocks to its rate; ResMLP's drop-path is its only random op).
EXPECTED_RATES = {"libai_gpt2_cpu": {"Dropout": 0.1}, "libai_bert_cpu": {"Dropout": 0.1},
                  "libai_t5_cpu": {"Dropout": 0.1}, "libai_roberta_cpu": {"Dropout": 0.1},
                  "libai_vit_digits_cpu": {"Dropout": 0.1, "DropPath": 0.2},
                  "libai_swin_digits_cpu": {"Dropout": 0.1, "DropPath": 0.2},
                  "libai_swinv2_digits_cpu": {"Dropout": 0.1, "DropPath": 0.2},
                  "libai_resmlp_digits_cpu": {"DropPath": 0.2}}
# The model class each config trains, by the name libai.models exports it under.
MODELS = {"libai_gpt2_cpu": "GPTForPreTraining", "libai_bert_cpu": "BertForPreTraining",
          "libai_t5_cpu": "T5ForPreTraining", "libai_vit_digits_cpu": "VisionTransformer",
          "libai_swin_digits_cpu": "SwinTransformer", "libai_roberta_cpu": "RobertaForPreTraining",
          "libai_swinv2_digits_cpu": "SwinTransformerV2", "libai_resmlp_digits_cpu": "ResMLP"}
# What libai.models exports besides: backbones of the models above and heads for fine-tuning.
NOT_PRETRAINING = {"GPTModel", "BertModel", "T5Model", "RobertaModel", "BertForClassification", "RobertaForCausalLM"}


def load(repo_root, name):
    return LazyConfig.load(os.path.join(repo_root, "configs", f"{name}.py"))


@pytest.mark.parametrize("name", CONFIGS)
def test_config_reads_like_its_layout(repo_root, name):
    cfg = load(repo_root, name)
    assert cfg.train.trainer == "libai_ext.ConsistentBatchTrainer"
    assert cfg.train.dist.pipeline_num_layers == 4  # one pipeline layer index per transformer block
    for stage_count in (2, 4):
        assert cfg.train.dist.pipeline_num_layers % stage_count == 0
    if name in ZOO_TEXT:
        assert cfg.text_data.root == "./data/libai_text"
        assert cfg.model.cfg.bias_dropout_fusion and not cfg.model.cfg.bias_gelu_fusion
        assert cfg.model.cfg.num_attention_heads % 2 == 0  # tensor parallel over 2 ranks
    elif name == "libai_resmlp_digits_cpu":  # LiBai's ResMLP passes drop_rate nowhere: drop-path only
        assert cfg.dataloader.train.mixup_func is not None
        assert cfg.model.drop_rate == 0 and cfg.model.drop_path_rate > 0
    else:
        assert cfg.train.train_micro_batch_size % 2 == 0 and cfg.dataloader.train.mixup_func is not None
        assert cfg.model.drop_rate > 0 and cfg.model.attn_drop_rate > 0 and cfg.model.drop_path_rate > 0


def test_the_configs_cover_every_model_libai_exports():
    """Every model class of the installed ``libai.models`` is trained here (or is a backbone/fine-tuning
    head of one that is), and each config builds exactly the class it is listed for."""
    import libai.models

    exported = {name for name in dir(libai.models) if name[0].isupper()}
    trained = {MODELS[name] for name in CONFIGS}
    assert exported - NOT_PRETRAINING == trained, sorted(exported - NOT_PRETRAINING ^ trained)
    for name in CONFIGS:
        target = load(ROOT, name).model._target_
        assert target is getattr(libai.models, MODELS[name]), name


ITERS = 3


def run_configs(repo_root, tmp_path, text_data, nproc, pp):
    args = ["--repo", repo_root, "--configs", *CONFIGS, "--text-data", text_data, "--digits",
            str(tmp_path / "digits"), "--out", str(tmp_path / "out"), "--iters", str(ITERS), "--pp", str(pp)]
    result = launch(rank_script("libai_zoo_configs.py"), nproc, args, timeout=600, workdir=str(tmp_path / "logs"))
    records = records_of_every_rank(result, count=len(CONFIGS))
    return {rank: {r["config"]: r for r in recs} for rank, recs in records.items()}


@pytest.fixture(scope="module")
def one_rank(repo_root, tmp_path_factory, libai_text_data):
    """The configs on 1 rank: the run both tests read (the reference of pp2)."""
    return run_configs(repo_root, tmp_path_factory.mktemp("zoo-configs-one"), libai_text_data, nproc=1, pp=1)[0]


@pytest.mark.long  # the quick tier trains them in tests/test_zoo_equivalence.py
def test_each_config_trains_from_the_seed_with_every_dropout_converted(one_rank):
    assert sorted(one_rank) == sorted(CONFIGS)
    for name, record in one_rank.items():
        assert record["trainer"] == "ConsistentBatchTrainer"
        assert len(record["losses"]) == ITERS and all(math.isfinite(x) for x in record["losses"]), (name, record)
        assert record["unconverted"] == [], name
        largest = {}
        for kind, rate in record["stochastic"].values():
            largest[kind] = max(largest.get(kind, 0.0), rate)
        assert largest == pytest.approx(EXPECTED_RATES[name]), (name, record["stochastic"])
        dropouts = [rate for kind, rate in record["stochastic"].values() if kind == "Dropout"]
        if "Dropout" in EXPECTED_RATES[name]:
            assert len(dropouts) >= 9 and min(dropouts) == pytest.approx(0.1), name  # none of them off


@pytest.mark.long
def test_each_config_splits_over_two_stages_and_follows_one_rank(repo_root, tmp_path, libai_text_data, one_rank):
    """pp2 puts each model's layers on both stages, and its losses follow the 1-rank run's."""
    two = run_configs(repo_root, tmp_path / "two", libai_text_data, nproc=2, pp=2)
    for name in CONFIGS:
        assert two[0][name]["placements"] == [[0], [1]] == two[1][name]["placements"], name
        assert two[0][name]["losses"] == pytest.approx(one_rank[name]["losses"], abs=1e-5), name
