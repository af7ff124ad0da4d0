"""LiBai's own layers and models under libai_ext's streams (one process; the layouts are in
tests/test_zoo_equivalence.py).

* conversion: every ``nn.Dropout`` and LiBai ``DropPath`` of LiBai's GPT, BERT, ViT, T5 and Swin
  becomes a ``libai_ext.random.layers`` layer under the same name, state dict keys unchanged;
* the fused dropout ops LiBai calls under ``bias_dropout_fusion`` have no CPU kernel in OneFlow 0.9.0
  (stock fails); routed, they run and draw exactly the masks of the unfused path;
* ``train.seed`` controls the masks (stock ``nn.Dropout`` ignores every seed);
* the audit refuses, by module name and source line, the random ops no key covers (warns under
  "fast"), and raises nothing on LiBai's own models; a draw in a helper function is keyed.
"""
import logging
import sys

import numpy as np
import oneflow as flow
import pytest

from conftest import RANK_SCRIPTS

sys.path.insert(0, RANK_SCRIPTS)


@pytest.fixture(scope="module", autouse=True)
def one_rank_layout():
    from common import layout_parser, setup_layout

    setup_layout(layout_parser().parse_args(["--layers", "4"]))


@pytest.fixture
def routed():
    from libai_ext.random.layers import stochastic_ops

    stochastic_ops.route_stochastic_ops()
    yield stochastic_ops
    stochastic_ops.unroute_stochastic_ops()


def gpt(fused=False, p=0.1):
    import inspect

    from libai.models import GPTModel

    layers = "num_layers" if "num_layers" in inspect.signature(GPTModel.__init__).parameters else "hidden_layers"
    return GPTModel(**{layers: 2}, vocab_size=64, hidden_size=32, ffn_hidden_size=64, num_attention_heads=4,
                    max_seq_length=16, embedding_dropout_prob=p, attention_dropout_prob=p, output_dropout_prob=p,
                    bias_gelu_fusion=False, bias_dropout_fusion=fused, scale_mask_softmax_fusion=False)


def token_ids():
    ids = np.random.RandomState(0).randint(0, 64, (4, 16))
    return flow.tensor(ids, dtype=flow.long).to_global(placement=flow.placement("cpu", [0]), sbp=flow.sbp.broadcast)


def prepared(model):
    from libai_ext.random.layers import convert_stochastic_layers, name_stochastic_layers, stochastic_ops

    converted = convert_stochastic_layers(model)
    name_stochastic_layers(model)
    stochastic_ops.watch_model(model)
    return model.train(), converted


def forward(model, step=5):
    from libai_ext.random.draws import drawing_step

    with drawing_step(step):
        return model(token_ids()).numpy()


def libai_models():
    from libai.models import BertModel, SwinTransformer, T5Model, VisionTransformer

    text = dict(vocab_size=64, hidden_size=32, num_attention_heads=4, max_position_embeddings=16)
    return {
        "gpt": lambda: gpt(fused=True),
        "bert": lambda: BertModel(hidden_layers=2, intermediate_size=64, hidden_dropout_prob=0.1,
                                  attention_probs_dropout_prob=0.1, bias_gelu_fusion=False, bias_dropout_fusion=True,
                                  scale_mask_softmax_fusion=False, **text),
        "vit": lambda: VisionTransformer(img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=4, num_classes=10,
                                         drop_rate=0.1, attn_drop_rate=0.1, drop_path_rate=0.2),
        "t5": lambda: T5Model(hidden_layers=2, intermediate_size=64, embedding_dropout_prob=0.1,
                              hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, **text),
        "swin": lambda: SwinTransformer(img_size=16, patch_size=2, in_chans=3, num_classes=10, embed_dim=12,
                                        depths=[2, 2], num_heads=[3, 6], window_size=4, drop_rate=0.1,
                                        attn_drop_rate=0.1, drop_path_rate=0.2),
    }


@pytest.mark.parametrize("name", ["gpt", "bert", "vit", "t5", "swin"])
def test_every_stochastic_module_of_libai_models_is_converted(name):
    from libai_ext.random.layers import DropPath, Dropout
    from libai_ext.random.audit import stochastic_findings

    model = libai_models()[name]()
    keys = set(model.state_dict())
    stochastic = [n for n, m in model.named_modules() if type(m) is flow.nn.Dropout or type(m).__name__ == "DropPath"]
    assert stochastic, f"{name}: no stochastic module to convert"
    model, converted = prepared(model)
    assert set(stochastic) <= set(converted)
    modules = dict(model.named_modules())
    for module_name in stochastic:
        assert isinstance(modules[module_name], (Dropout, DropPath)), module_name
    left = [n for n, m in model.named_modules() if type(m) is flow.nn.Dropout]
    assert not left, f"{name}: nn.Dropout left at {left}"
    assert set(model.state_dict()) == keys, "the conversion changed the state dict's keys"
    assert stochastic_findings(model) == [], f"{name}: the audit flags LiBai's own model"


def test_fused_dropout_has_no_cpu_kernel_and_routed_draws_the_unfused_masks(routed):
    from libai_ext import seed_everything

    seed_everything(3)
    flow.manual_seed(0)
    stock = gpt(fused=True).train()
    with pytest.raises(Exception, match="fused_bias_add_mask_scale|Cannot find the kernel"):
        routed.unroute_stochastic_ops()
        stock(token_ids())
    routed.route_stochastic_ops()
    outputs = {}
    for fused in (False, True):
        flow.manual_seed(0)
        model, converted = prepared(gpt(fused=fused))
        outputs[fused] = forward(model)
        if fused:  # the unfused path's own layers, added for the fused op's role
            assert "transformer.layers.0.mlp.dropout" in converted
            assert "transformer.layers.0.self_attention.output_dropout" in converted
    np.testing.assert_array_equal(outputs[True], outputs[False])
    flow.manual_seed(0)
    plain, _ = prepared(gpt(fused=False, p=0.0))
    assert not np.array_equal(forward(plain), outputs[True]), "no dropout was applied"


def test_the_seed_controls_the_masks_and_stock_ignores_it(routed):
    from libai_ext import seed_everything

    masks = {}
    for seed in (1, 2):
        seed_everything(seed)
        flow.manual_seed(0)
        model, _ = prepared(gpt())
        masks[seed] = forward(model)
    assert not np.array_equal(masks[1], masks[2]), "train.seed did not change the masks"
    routed.unroute_stochastic_ops()  # OneFlow's own nn.Dropout
    stock = {}
    for seed in (1, 2):
        flow.manual_seed(0)
        model = gpt().train()  # weights from manual_seed(0), dropout from nn.Dropout's own generators
        flow.manual_seed(seed)
        stock[seed] = model(token_ids()).numpy()
    np.testing.assert_array_equal(stock[1], stock[2])  # OneFlow's nn.Dropout ignores the seed


class SamplesCategories(flow.nn.Module):
    def forward(self, x):
        return flow.multinomial(x.softmax(-1), 1)


class DrawsInAHelper(flow.nn.Module):
    def forward(self, x):
        return noisy(x)


def noisy(x):
    return x + flow.randn(*x.shape)


class FunctionalDropout(flow.nn.Module):
    def forward(self, x):
        return flow.nn.functional.dropout(x, 0.5, training=self.training)


def test_the_audit_refuses_an_op_no_key_covers_and_names_it(caplog):
    from libai_ext.random.audit import StochasticModelError, audit_stochastic_ops

    model = flow.nn.Sequential(flow.nn.Linear(4, 4), SamplesCategories(), flow.nn.LSTM(4, 4, 2, dropout=0.5))
    with pytest.raises(StochasticModelError, match=r"1 \(SamplesCategories.forward\): calls multinomial at "
                                                   r".*test_libai_zoo.py") as refused:
        audit_stochastic_ops(model, "layout_invariant")
    assert "2: a oneflow.nn.LSTM module" in str(refused.value)
    with caplog.at_level(logging.WARNING):
        assert len(audit_stochastic_ops(model, "fast")) == 2
    assert "calls multinomial" in caplog.text
    routed_ops = flow.nn.Sequential(FunctionalDropout(), DrawsInAHelper(), flow.nn.LSTM(4, 4, 2), flow.nn.Dropout2d())
    assert audit_stochastic_ops(routed_ops, "layout_invariant") == []


def test_a_draw_in_a_helper_is_keyed_when_the_forward_runs(routed):
    from libai_ext import seed_everything
    from libai_ext.random.draws import drawing_step

    seed_everything(1, randomness="layout_invariant")
    model = DrawsInAHelper()
    routed.watch_model(model)
    drawn = []
    for seed in (1, 2):
        flow.manual_seed(seed)  # OneFlow's generator is not what draws
        with drawing_step(4):
            drawn.append(model(flow.ones(2, 2)).numpy())
    np.testing.assert_array_equal(*drawn)
    with drawing_step(5):
        assert not np.array_equal(model(flow.ones(2, 2)).numpy(), drawn[0])
    assert flow.randn(2).shape == (2,)  # outside a forward: OneFlow's own


def test_functional_dropout_of_any_module_gets_a_stream_named_after_it(routed):
    from libai_ext import seed_everything

    seed_everything(1)
    model = flow.nn.Sequential(FunctionalDropout())
    routed.watch_model(model)
    x = flow.ones(64, 64)
    first = forward_in_step(model, x, 0)
    np.testing.assert_array_equal(first, forward_in_step(model, x, 0))  # the step decides
    assert not np.array_equal(first, forward_in_step(model, x, 1))
    streams = [layer.stream for owned in routed._streams.values() for layer in owned.values()]
    assert any(stream.startswith("0:dropout@test_libai_zoo.py:") for stream in streams), streams
    assert np.array_equal(model.eval()(x).numpy(), x.numpy())


def forward_in_step(model, x, step):
    from libai_ext.random.draws import drawing_step

    with drawing_step(step):
        return model.train()(x).numpy()
