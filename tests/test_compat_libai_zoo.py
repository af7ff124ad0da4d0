"""libai_ext.compat for LiBai's model zoo: the NLP API of each line, the CPU GeLU fusion, 0.1.1's Swin,
T5's special tokens.

One process, no ranks.  Each decision is asserted against what the installed LiBai really has, and
each repair against the failure of the stock code it replaces.
"""
import inspect
import types

import numpy as np
import oneflow as flow
import pytest
from omegaconf import DictConfig

from libai_ext.compat import cpu_bias_gelu, detect, libai_main, nlp_api, patching, special_tokens, swin_v0_1

MAIN = detect.libai_line() is libai_main


# --- nlp_api: one config, the installed line's arguments -------------------------------------------

GPT_SIZES = dict(vocab_size=16, hidden_size=8, ffn_hidden_size=32, num_attention_heads=2)


def test_model_config_names_the_layer_count_as_the_installed_model_does():
    from libai.models import BertModel, GPTModel

    cfg = nlp_api.model_config(GPTModel, layers=3, wrapper_fields=dict(extra=1), **GPT_SIZES)
    layer_key = "hidden_layers" if MAIN else "num_layers"
    assert cfg[layer_key] == 3 and nlp_api.layer_count(cfg) == 3
    assert ("num_layers" in cfg) != MAIN and cfg.hidden_size == 8 and cfg.extra == 1
    # Every argument of the installed class is there (its from_config reads them all): main's new
    # apply_residual_post_layernorm too, at LiBai's default.
    assert set(nlp_api.parameters(GPTModel)) <= set(cfg)
    assert ("apply_residual_post_layernorm" in cfg) == MAIN
    bert = nlp_api.model_config(BertModel, layers=2, vocab_size=16, hidden_size=8, num_attention_heads=2,
                                intermediate_size=32, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                                max_position_embeddings=16)
    assert nlp_api.layer_count(bert) == 2 and bert.hidden_layers == 2  # both lines call it hidden_layers


def test_model_config_refuses_a_field_no_line_has_and_drops_the_other_lines_fields():
    from libai.models import GPTModel

    with pytest.raises(TypeError, match="hidden_szie"):
        nlp_api.model_config(GPTModel, layers=2, hidden_szie=8, **GPT_SIZES)
    with pytest.raises(TypeError, match="vocab_size"):
        nlp_api.model_config(GPTModel, layers=2, hidden_size=8)
    cfg = nlp_api.model_config(GPTModel, layers=2, apply_residual_post_layernorm=False, **GPT_SIZES)
    assert ("apply_residual_post_layernorm" in cfg) == MAIN


def test_dataset_takes_name_seed_and_max_num_samples_only_where_the_line_does():
    from libai.data.datasets import GPT2Dataset

    call = nlp_api.dataset(GPT2Dataset, name="gpt-2", data_prefix="p", indexed_dataset=None, max_seq_length=8,
                           seed=3)
    assert call.data_prefix == "p" and call.max_seq_length == 8
    assert ("name" in call and "seed" in call) == MAIN == ("name" in inspect.signature(GPT2Dataset).parameters)
    with pytest.raises(TypeError, match="max_seq_len"):
        nlp_api.dataset(GPT2Dataset, data_prefix="p", max_seq_len=8)


def test_dataset_gives_t5s_masking_rate_the_installed_lines_name():
    from libai.data.datasets import T5Dataset

    call = nlp_api.dataset(T5Dataset, data_prefix="p", indexed_dataset=None, max_seq_length=8, max_seq_length_dec=4,
                           masked_lm_prob=0.15, short_seq_prob=0.1, seed=1)
    own, other = ("masked_lm_prob", "mask_lm_prob") if MAIN else ("mask_lm_prob", "masked_lm_prob")
    assert call[own] == 0.15 and other not in call
    assert own in inspect.signature(T5Dataset).parameters


def test_train_val_test_loader_carries_the_key_mains_trainer_fills():
    from libai.data import build_nlp_train_val_test_loader

    call = nlp_api.train_val_test_loader(["a", "b"], splits=[[9, 1, 0], [8, 1, 1]])
    assert call.weights == [1.0, 1.0] and call.num_workers == 0
    assert ("train_val_test_num_samples" in call) == MAIN
    assert ("train_val_test_num_samples" in inspect.signature(build_nlp_train_val_test_loader).parameters) == MAIN


def test_softmax_fusion_drops_out_only_in_mains_attention():
    assert nlp_api.softmax_fusion_drops_out() == MAIN


# --- cpu_bias_gelu: LiBai's Swin hard-codes a fusion with no CPU kernel -----------------------------

def reference_bias_gelu(x, bias):
    from math import erf

    z = x + bias
    return z * 0.5 * (1.0 + np.vectorize(erf)(z / np.sqrt(2.0)))


def test_oneflows_fused_bias_gelu_has_no_cpu_kernel():
    fused = getattr(flow._C.fused_bias_add_gelu, "fused", flow._C.fused_bias_add_gelu)
    with pytest.raises(RuntimeError, match="fused_bias_add_gelu"):
        fused(flow.randn(2, 3), flow.randn(3), axis=1)


def test_composed_bias_gelu_is_exact_gelu_with_gradients():
    x = flow.tensor(np.random.RandomState(0).randn(4, 5).astype(np.float32), requires_grad=True)
    bias = flow.tensor(np.random.RandomState(1).randn(5).astype(np.float32), requires_grad=True)
    y = cpu_bias_gelu.composed_bias_add_gelu(x, bias, axis=1)
    np.testing.assert_allclose(y.numpy(), reference_bias_gelu(x.numpy(), bias.numpy()), rtol=1e-5, atol=1e-6)
    y.sum().backward()
    assert x.grad is not None and np.allclose(bias.grad.numpy(), x.grad.numpy().sum(axis=0), atol=1e-5)


def test_dispatch_composes_on_cpu_and_keeps_the_fused_kernel_elsewhere():
    calls = []
    dispatch = cpu_bias_gelu.dispatching_bias_add_gelu(lambda x, bias, axis: calls.append(axis) or "fused")
    x = flow.randn(2, 3)
    np.testing.assert_allclose(dispatch(x, flow.zeros(3), axis=1).numpy(),
                               reference_bias_gelu(x.numpy(), np.zeros(3)), rtol=1e-5, atol=1e-6)

    class CudaTensor:  # what the dispatch reads of a CUDA tensor
        is_global = False
        device = type("Device", (), {"type": "cuda"})()

    assert dispatch(CudaTensor(), None, axis=2) == "fused" and calls == [2]


# --- swin_v0_1: LiBai 0.1.1's Swin ---------------------------------------------------------------

def reference_windows(x, ws):
    B, H, W, C = x.shape
    return x.reshape(B, H // ws, ws, W // ws, ws, C).transpose(0, 1, 3, 2, 4, 5).reshape(-1, ws, ws, C)


def test_window_partition_and_reverse_are_each_others_inverse():
    x = np.arange(2 * 4 * 6 * 3, dtype=np.float32).reshape(2, 4, 6, 3)
    windows = swin_v0_1.window_partition(flow.tensor(x), 2)
    np.testing.assert_array_equal(windows.numpy(), reference_windows(x, 2))
    np.testing.assert_array_equal(swin_v0_1.window_reverse(windows, 2, 4, 6).numpy(), x)


def stock_window_partition():
    """The installed ``window_partition`` as LiBai wrote it (read from its file: the module's may be ours)."""
    import ast

    import libai.models.swin_transformer as swin

    with open(swin.__file__) as f:
        tree = ast.parse(f.read())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "window_partition")
    namespace = {}
    exec(compile(ast.Module(body=[node], type_ignores=[]), swin.__file__, "exec"), namespace)
    return namespace["window_partition"]


def test_the_repairs_apply_exactly_where_the_installed_swin_needs_them():
    import libai_ext

    import libai.models.swin_transformer as swin

    stock = types.SimpleNamespace(window_partition=stock_window_partition())
    assert swin_v0_1.needs_view_repair(stock) == (not MAIN)  # 0.1.1's own window_partition fails
    assert swin_v0_1.lacks_layer_index(swin) == (not MAIN)
    libai_ext.apply_patches()
    repaired = sorted(k.rsplit("swin_transformer.", 1)[1] for k in patching.applied() if ".swin_transformer." in k)
    assert repaired == ([] if MAIN else ["SwinTransformer.__init__", "window_partition", "window_reverse"])


def build_one_rank_swin(pipeline_num_layers=4):
    import libai_ext
    from libai.models import SwinTransformer
    from libai.utils import distributed as dist

    libai_ext.apply_patches()
    dist.setup_dist_util(DictConfig({"data_parallel_size": 1, "tensor_parallel_size": 1,
                                     "pipeline_parallel_size": 1, "pipeline_num_layers": pipeline_num_layers}))
    return SwinTransformer(img_size=32, patch_size=8, in_chans=3, num_classes=10, embed_dim=16, depths=[2, 2],
                           num_heads=[2, 4], window_size=2, drop_rate=0.1, attn_drop_rate=0.1, drop_path_rate=0.2)


def test_libais_swin_builds_numbered_as_main_numbers_its_layers():
    model = build_one_rank_swin()
    blocks = [block for layer in model.layers for block in layer.blocks]
    # LiBai main's own numbering (and, on 0.1.1, ours): blocks across stages, each patch merge
    # with its stage's last block.
    assert [block.layer_idx for block in blocks] == [0, 1, 2, 3]
    assert model.layers[0].downsample.layer_idx == 1
    assert [(type(m).__name__, i) for m, i in swin_v0_1.stage_layout(model)] == [  # (main's, as 0.1.1 lacks it)
        ("PatchEmbed", 0), ("SwinTransformerBlock", 0), ("SwinTransformerBlock", 1), ("PatchMerging", 1),
        ("SwinTransformerBlock", 2), ("SwinTransformerBlock", 3), ("LayerNorm", -1), (type(model.head).__name__, -1)]
    # Training through it (forward and backward, 1 rank and pp2) is tests/test_libai_zoo_configs.py's.


# --- special_tokens: T5's declared tokens, counted before the vocabulary is sized ------------------

T5_SENTINELS = [f"<extra_id_{i}>" for i in range(100)]


def t5_config(repo_root, text_root):
    """LiBai's T5 tokenizer set-up (configs/libai_t5_cpu.py) over the session's text data."""
    from libai.config import LazyConfig

    cfg = LazyConfig.load(f"{repo_root}/configs/libai_t5_cpu.py")
    return LazyConfig.apply_overrides(cfg, [f"text_data.root={text_root}"])


def t5_dataset(cfg, tokenizer):
    """LiBai's ``T5Dataset`` as the config builds it (main's loader builder fills ``max_num_samples``)."""
    from libai.config import instantiate
    from libai.data.datasets import T5Dataset
    from omegaconf import OmegaConf

    config = cfg.dataloader.train.dataset[0]
    fields = {key: instantiate(config[key]) if OmegaConf.is_dict(config[key]) else config[key]
              for key in config if key != "_target_"}
    if "max_num_samples" in nlp_api.parameters(T5Dataset):
        fields["max_num_samples"] = 64
    return T5Dataset(tokenizer=tokenizer, **fields)


def sized_tokenizer(cfg, build):
    """``DefaultTrainer.build_tokenizer`` with LiBai's ``build_tokenizer`` as ``build``: the tokenizer and the
    vocabulary size it gives the model."""
    import libai.engine.default as default
    from libai.engine import DefaultTrainer

    installed = default.build_tokenizer
    default.build_tokenizer = build
    try:
        tokenizer = DefaultTrainer.build_tokenizer(cfg)
    finally:
        default.build_tokenizer = installed
    return tokenizer, cfg.model.cfg.vocab_size


def stock_build_tokenizer():
    import libai.tokenizer.build as build

    return getattr(build.build_tokenizer, "libai_original", build.build_tokenizer)


def test_stock_libai_loses_t5s_special_tokens(repo_root, libai_text_data):
    """0.1.1: every one is [UNK]; main: added by T5Dataset after the size is fixed, past the embedding."""
    cfg = t5_config(repo_root, libai_text_data)
    tokenizer, vocab_size = sized_tokenizer(cfg, stock_build_tokenizer())
    assert vocab_size == len(tokenizer) == 2048  # the vocabulary file alone
    sample = t5_dataset(cfg, tokenizer)[0]
    decoder_ids = sample.get("decoder_input_ids").tensor.numpy()
    if MAIN:
        assert len(tokenizer) == 2150 and tokenizer.bos_token_id == 2048  # added by the dataset
        assert decoder_ids[0] == 2048 >= vocab_size  # the decoder starts on a row the embedding lacks
    else:
        unk = tokenizer.unk_token_id
        assert tokenizer.bos_token_id == tokenizer.eos_token_id == unk
        assert set(tokenizer.additional_special_tokens_ids) == {unk}
        assert decoder_ids[0] == unk  # the decoder starts on [UNK], every masked span is [UNK]


def test_the_repair_counts_t5s_tokens_before_the_size_is_fixed(repo_root, libai_text_data):
    import libai_ext

    libai_ext.apply_patches()
    import libai.engine.default as default

    assert getattr(default.build_tokenizer, "libai_original", None) is stock_build_tokenizer()
    cfg = t5_config(repo_root, libai_text_data)
    tokenizer, vocab_size = sized_tokenizer(cfg, default.build_tokenizer)
    assert vocab_size == len(tokenizer) == 2150
    # Declared order, as LiBai main's T5Dataset numbers them (never a hash-seed-dependent set order).
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id) == (2048, 2049)
    assert tokenizer.additional_special_tokens_ids == list(range(2050, 2150))
    dataset = t5_dataset(cfg, tokenizer)
    assert len(tokenizer) == 2150  # main's own add_tokens adds nothing now
    sentinels_seen = 0
    for index in range(8):
        sample = dataset[index]
        encoder_ids = sample.get("encoder_input_ids").tensor.numpy()
        decoder_ids = sample.get("decoder_input_ids").tensor.numpy()
        assert max(encoder_ids.max(), decoder_ids.max()) < vocab_size, index
        assert decoder_ids[0] == tokenizer.bos_token_id, index
        sentinels_seen += int(np.isin(encoder_ids, tokenizer.additional_special_tokens_ids).sum())
    assert sentinels_seen >= 8  # every sample's masked spans are marked by sentinels


def test_tokenizers_that_hold_their_special_tokens_are_left_alone(libai_text_data):
    from libai.tokenizer import BertTokenizer, GPT2Tokenizer

    gpt2 = GPT2Tokenizer(f"{libai_text_data}/gpt2/vocab.json", f"{libai_text_data}/gpt2/merges.txt")
    bert = BertTokenizer(f"{libai_text_data}/bert/vocab.txt", do_lower_case=True)
    for tokenizer, size in ((gpt2, 1024), (bert, 2048)):
        assert special_tokens.add_missing_special_tokens(tokenizer) == [] and len(tokenizer) == size
    t5 = BertTokenizer(f"{libai_text_data}/bert/vocab.txt", bos_token="[BOS]", eos_token="[EOS]",
                       additional_special_tokens=T5_SENTINELS)
    assert special_tokens.missing_special_tokens(t5) == ["[BOS]", "[EOS]"] + T5_SENTINELS
