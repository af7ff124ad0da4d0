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
* long tier: both vocabularies on tp2, and the 507-token model with LiBai's padding
  (``tests/configs/libai_gpt2_vocab507_libai_padding.py``, ``tokenization.max_tensor_parallel_size=1``:
  tp2 keeps LiBai's 508 rows, with a warning), which the tool flags; the three configs train in one
  launch, and under ``make test-all`` the quick case reads its tp2 row from those runs.  (The padded
  size is the same for every tp up to the key's: the one-process tests above; a tp4 launch of 4 ranks
  would show the same rows again.)
"""
import logging
import os

import pytest
from libai.config import LazyConfig

from conftest import ROOT, check_equivalence, load_tool, long_tier_selected, working_folder

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

ODD, GPT2 = "libai_gpt2_vocab507", "libai_gpt2_vocab50257"
LIBAI_PADDING = "libai_gpt2_vocab507_libai_padding"  # the 507-token model, tokenization.max_tensor_parallel_size=1


def run_tool(work, configs, layouts, iters):
    """``(status, {config: {layout: (max relative difference, the tool's verdict)}}, output)``: 1 rank vs
    ``layouts``, all ``configs`` in one launch per layout; the verdict is True where the layout matches."""
    argv = ["--config-file", *[os.path.join(TEST_CONFIGS, f"{name}.py") for name in configs],
            "--layouts", "1", *layouts, "--iters", str(iters), "--rtol", str(RTOL), "--timeout", "1800",
            "--workdir", str(work / "runs")]
    status, tables, text = check_equivalence(argv, configs, layouts)
    return status, {config: {layout: (float(cells[1]), cells[2] == "-") for layout, cells in rows.items()}
                    for config, rows in tables.items()}, text


def trains_one_model(row):
    difference, matches = row
    return matches and difference <= RTOL


@pytest.fixture(scope="module")
def tp_layouts(tmp_path_factory):
    """The long tier's runs: both vocabularies and the 507-token model with LiBai's padding on tp2."""
    return run_tool(tmp_path_factory.mktemp("vocab-tp"), [ODD, GPT2, LIBAI_PADDING], ["tp2"], 2)


def test_an_odd_vocabulary_trains_one_model_on_tp2(request, tmp_path):
    """(Where the long tier runs too, read from its runs, which hold this one.)"""
    if long_tier_selected(request):
        status, tables, text = request.getfixturevalue("tp_layouts")
    else:
        status, tables, text = run_tool(tmp_path, [ODD], ["tp2"], 2)
        assert status == tool.EXIT_MATCH, text
    assert trains_one_model(tables[ODD]["tp2"]), text


@pytest.mark.long
def test_both_vocabularies_train_one_model_on_tp2(tp_layouts):
    status, tables, text = tp_layouts
    for config in (ODD, GPT2):
        assert trains_one_model(tables[config]["tp2"]), (config, text)


@pytest.mark.long
def test_libais_padding_trains_another_model_on_tp2(tp_layouts):
    status, tables, text = tp_layouts
    difference, matches = tables[LIBAI_PADDING]["tp2"]
    assert status == tool.EXIT_DIFFER and not matches and difference > RTOL, text
