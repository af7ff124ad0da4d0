"""One model on every tensor-parallel size, whatever the vocabulary (``compat.vocab_padding``).

LiBai (both lines) pads the vocabulary to a multiple of ``make_vocab_size_divisible_by x
tensor_parallel_size``, so the embedding and the logits change shape with tp.  Under
``"layout_invariant"`` ``ConsistentBatchTrainer`` pads for ``tokenization.max_tensor_parallel_size``
(default 8) instead.  On LiBai's own ``GPT2Tokenizer``, ``DefaultTrainer.build_tokenizer`` and
``GPT2Dataset`` (tests/configs: a 507-token BPE with ``make_vocab_size_divisible_by=1``, and GPT-2's
50,257 tokens with LiBai's 128):

* one process: stock LiBai's padded size changes with tp, the plugin's does not;
* quick tier: the 507-token model on tp2 trains as on 1 rank (``tools/check_equivalence.py``, 2
  iterations, within 1e-5);
* long tier: both vocabularies on tp2 and tp4, and the 507-token model with LiBai's padding
  (``tokenization.max_tensor_parallel_size=1``: tp2 keeps LiBai's 508 rows, with a warning), which
  the tool flags.
"""
import logging
import os

import pytest
from libai.config import LazyConfig

from conftest import ROOT, load_tool, relative_differences, working_folder

RTOL = 1e-5
TEST_CONFIGS = os.path.join(ROOT, "tests", "configs")
tool = load_tool("check_equivalence")


@pytest.fixture(scope="module", autouse=True)
def data_folder(tmp_path_factory):
    """The configs build their data under ./data on first use: one folder for every run here."""
    with working_folder(tmp_path_factory.getbasetemp() / "vocab-data") as folder:
        yield folder


# --- one process -----------------------------------------------------------------------------------

def test_padded_size_is_the_one_of_the_largest_tensor_parallel_size():
    from libai_ext.compat.vocab_padding import padded_vocab_size

    assert [padded_vocab_size(507, 1, tp, 8) for tp in (1, 2, 4, 8)] == [(512, True)] * 4
    assert [padded_vocab_size(50257, 128, tp, 8) for tp in (1, 2, 4, 8)] == [(51200, True)] * 4
    assert padded_vocab_size(50257, 128, 2, 2) == (50432, True)
    assert padded_vocab_size(507, 1, 16, 8) == (512, False)  # a tp that does not divide it: LiBai's padding
    assert padded_vocab_size(508, 1, 3, 8) == (510, False)


def tokenizer_config(name, tp, *overrides):
    cfg = LazyConfig.load(os.path.join(TEST_CONFIGS, f"{name}.py"))
    return LazyConfig.apply_overrides(cfg, [f"train.dist.tensor_parallel_size={tp}", *overrides])


@pytest.mark.parametrize("name, stock, plugin", [
    ("libai_gpt2_vocab507", [507, 508, 508], 512),
    ("libai_gpt2_vocab50257", [50304, 50432, 50688], 51200),
])
def test_stock_padding_follows_tp_and_the_plugins_does_not(name, stock, plugin):
    from libai.engine import DefaultTrainer

    from libai_ext import ConsistentBatchTrainer

    sizes = {}
    for trainer in (DefaultTrainer, ConsistentBatchTrainer):
        sizes[trainer] = []
        for tp in (1, 2, 4):
            cfg = tokenizer_config(name, tp)
            trainer.build_tokenizer(cfg)
            sizes[trainer].append(cfg.model.cfg.vocab_size)
    assert sizes[DefaultTrainer] == stock
    assert sizes[ConsistentBatchTrainer] == [plugin] * 3


def test_a_tensor_parallel_size_the_key_does_not_cover_keeps_libais_padding_and_warns(caplog):
    from libai_ext import ConsistentBatchTrainer

    cfg = tokenizer_config("libai_gpt2_vocab507", 2, "tokenization.max_tensor_parallel_size=1")
    with caplog.at_level(logging.WARNING, logger="libai_ext"):
        ConsistentBatchTrainer.build_tokenizer(cfg)
    assert cfg.model.cfg.vocab_size == 508
    assert "tokenization.max_tensor_parallel_size=1 is not a multiple of train.dist.tensor_parallel_size=2" \
        in caplog.text and "tokenization.max_tensor_parallel_size=2" in caplog.text


def test_fast_mode_keeps_libais_padding_and_a_bad_key_is_refused_by_name():
    from libai_ext import ConsistentBatchTrainer

    cfg = tokenizer_config("libai_gpt2_vocab507", 2, "train.randomness=fast")
    ConsistentBatchTrainer.build_tokenizer(cfg)
    assert cfg.model.cfg.vocab_size == 508
    cfg = tokenizer_config("libai_gpt2_vocab507", 2, "tokenization.max_tensor_parallel_size=0")
    with pytest.raises(ValueError, match="tokenization.max_tensor_parallel_size must be an int >= 1"):
        ConsistentBatchTrainer.build_tokenizer(cfg)


# --- training on tp layouts --------------------------------------------------------------------------

def run_tool(work, configs, layouts, iters, *overrides):
    """``(status, {config: {layout: max relative difference}}, output)``: 1 rank vs ``layouts``."""
    argv = ["--config-file", *[os.path.join(TEST_CONFIGS, f"{name}.py") for name in configs],
            "--layouts", "1", *layouts, "--iters", str(iters), "--rtol", str(RTOL), "--timeout", "1800",
            "--workdir", str(work / "runs"), *overrides]
    return relative_differences(argv, configs, layouts)


def test_an_odd_vocabulary_trains_one_model_on_tp2(tmp_path):
    status, tables, text = run_tool(tmp_path, ["libai_gpt2_vocab507"], ["tp2"], 2)
    assert status == tool.EXIT_MATCH and tables["libai_gpt2_vocab507"]["tp2"] <= RTOL, text


@pytest.mark.long
def test_both_vocabularies_train_one_model_on_tp2_and_tp4(tmp_path):
    configs = ["libai_gpt2_vocab507", "libai_gpt2_vocab50257"]
    status, tables, text = run_tool(tmp_path, configs, ["tp2", "tp4"], 2)
    assert status == tool.EXIT_MATCH, text
    for config in configs:
        assert tables[config]["tp2"] <= RTOL and tables[config]["tp4"] <= RTOL, (config, text)


@pytest.mark.long
def test_libais_padding_trains_another_model_on_tp2(tmp_path):
    status, tables, text = run_tool(tmp_path, ["libai_gpt2_vocab507"], ["tp2"], 2,
                                    "tokenization.max_tensor_parallel_size=1")
    assert status == tool.EXIT_DIFFER and tables["libai_gpt2_vocab507"]["tp2"] > RTOL, text
