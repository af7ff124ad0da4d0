"""Every random op of OneFlow 0.9.0 inside a model's forward: routed to a keyed stream, or refused by name.

* The inventory (``libai_ext/random/oneflow_random_ops.py``) is what OneFlow's own registries say
  (derived again here from the installed OneFlow; the long tier also calls every ``oneflow._C``
  function again), and every op in it is either routed or refused: a new random op fails this file.
* Every entry point of a routed op (``oneflow._C.<op>``, its aliases in ``oneflow`` and
  ``oneflow.nn.functional``, ``Tensor`` methods, ``oneflow.nn.init``, the ``oneflow.nn`` modules;
  ``rank_scripts/random_op_cases.py``) draws inside a forward from a keyed stream: the same values
  whatever OneFlow's generator holds, new ones at another step; stock OneFlow draws other values at
  every repeat of the same step.  On 4 ranks, on six global layouts (1D and 2D placements, split,
  broadcast) and on local tensors under data parallelism, every case gives 1 rank's values; stock
  gives other values or fails (gumbel_softmax and randn_like have no global path, the fused
  dropouts no CPU kernel, dropout1d/2d/3d refuse every p).
* However the op is reached: a name bound at import (``from oneflow.nn.functional import
  dropout``, ``from oneflow._C import dropout``), a ``Tensor`` method, a helper function.
* Routed ops behave as OneFlow's: one stream per call site and rate (independent masks),
  ``inplace=True`` writes into the input, ``p=0`` / ``p=1``, the fused ops' formulas, dtypes and shapes.
* Refused ops (the RNNs' dropout, ``multinomial``, data readers, embedding stores) raise naming the op
  and the line, or warn under ``"fast"``; so does a module of no watched model drawing inside a forward.
* Two models with the same names: the second watched with a place draws other masks, two unprefixed
  ones in one step are refused; the trainer's model keeps its stream names.
* Keyed augmentation: a sample drawn through any of these ops outside a forward is the same whatever
  the read order.
"""
import importlib
import importlib.util
import logging
import os
import sys

import numpy as np
import oneflow as flow
import pytest

from conftest import RANK_SCRIPTS, ROOT, rank_script, records_of_every_rank

sys.path.insert(0, RANK_SCRIPTS)

from random_op_cases import BROKEN_IN_ONEFLOW, CASES, FAN_SCALED, LOCAL_ONLY, ROWS, Probe, all_cases  # noqa: E402

from libai_ext.random.layers import stochastic_ops  # noqa: E402
from libai_ext.random.layers.random_ops import HANDLERS  # noqa: E402
from libai_ext.random import oneflow_draws  # noqa: E402
from libai_ext.random.audit import REFUSED, StochasticModelError, audit_stochastic_ops, refused_modules  # noqa: E402
from libai_ext.random.draws import drawing_step  # noqa: E402
from libai_ext.random.oneflow_random_ops import INVENTORY  # noqa: E402

_TOOL = os.path.join(ROOT, "tools", "dev", "random_op_inventory.py")  # the generator of INVENTORY, a development tool
op_inventory = importlib.util.module_from_spec(importlib.util.spec_from_file_location("random_op_inventory", _TOOL))
op_inventory.__spec__.loader.exec_module(op_inventory)
from libai_ext.compat import libai_line, libai_main  # noqa: E402
from libai_ext.testing import launch  # noqa: E402

STEP, SEED = 7, 5  # as rank_scripts/random_ops.py
ONE_RANK = dict(placement=flow.placement("cpu", [0]), sbp=[flow.sbp.broadcast])
LOCAL = dict(device="cpu")
CALLED = "draws from the default generator (called)"


@pytest.fixture(autouse=True)
def routed():
    from libai_ext import seed_everything

    seed_everything(SEED, randomness="layout_invariant")
    stochastic_ops.route_stochastic_ops()
    yield stochastic_ops
    stochastic_ops.route_stochastic_ops()
    seed_everything(SEED, randomness="layout_invariant")


@pytest.fixture(scope="module")
def probe():
    model = Probe()
    stochastic_ops.watch_model(model)
    return model


def drawn(model, name, layout, rows=ROWS, step=STEP, **batch):
    with drawing_step(step, **batch):
        y = model(name, layout, rows)
    y = y[0] if isinstance(y, (tuple, list)) else y
    return y.numpy()


# ---- the inventory ------------------------------------------------------------------------------

def called_in_inventory():
    return {name: CALLED in entry["evidence"] for name, entry in INVENTORY["functions"].items()}


def test_the_inventory_is_what_the_installed_oneflows_registries_say():
    assert INVENTORY["oneflow"] == flow.__version__
    derived = op_inventory.derive(called_in_inventory())
    assert derived == INVENTORY, "python tools/dev/random_op_inventory.py --write, then route or refuse what is new"
    # The registries and the parser: 18 functions take a generator, and these draw without one.
    assert len(op_inventory.generator_functions()) == 18
    assert {"uniform_", "dropout1d", "dropout2d", "dropout3d", "lstm", "gru", "rnn_tanh", "rnn_relu"} <= \
        set(INVENTORY["functions"])


def test_another_oneflow_is_refused_naming_both_versions(monkeypatch):
    monkeypatch.setitem(INVENTORY, "oneflow", "0.8.0")
    with pytest.raises(RuntimeError, match=r"made for OneFlow 0\.8\.0, this is OneFlow 0\.9\.0.*oneflow==0\.8\.0"):
        oneflow_draws.inventory()


def test_the_generated_module_is_what_the_tool_writes():
    with open(op_inventory.GENERATED) as f:
        assert f.read() == op_inventory.render(INVENTORY)


@pytest.mark.long
def test_calling_every_oneflow_function_finds_the_draws_the_inventory_lists():
    drew = op_inventory.scan_default_generator_draws()
    assert len(drew) > 400, "the scan stopped early"
    listed = {name for name, called in called_in_inventory().items() if called}
    assert {name for name, d in drew.items() if d} == listed


def test_every_op_of_the_inventory_is_routed_or_refused():
    functions = set(INVENTORY["functions"])
    assert functions <= set(HANDLERS) | set(REFUSED), sorted(functions - set(HANDLERS) - set(REFUSED))
    assert set(HANDLERS) | set(REFUSED) <= functions  # nothing handled that OneFlow does not have
    both = set(HANDLERS) & set(REFUSED)
    assert both == {"rnn_tanh", "rnn_relu", "lstm", "gru"}, "routed unless they drop"


def test_every_entry_point_of_a_routed_op_has_a_case():
    cases = all_cases(broken=True)
    routed_ops = set(HANDLERS) - set(REFUSED)
    expected = {f"oneflow._C.{op}" for op in routed_ops}
    expected |= {alias for op in routed_ops for alias in INVENTORY["functions"][op]["aliases"]}
    expected |= {f"oneflow.Tensor.{method}" for method in INVENTORY["tensor_methods"]}
    expected |= {name for name, ops in INVENTORY["python"].items() if set(ops) <= routed_ops}
    assert expected - set(cases) == set(), sorted(expected - set(cases))
    for name, (op, _) in cases.items():
        assert op in routed_ops, (name, op)


# ---- routed, one rank ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(all_cases()))
def test_each_entry_point_draws_from_a_keyed_stream_and_stock_does_not(routed, probe, name):
    values = {}
    for label, layout in ([("local", LOCAL)] if name in LOCAL_ONLY else [("local", LOCAL), ("global", ONE_RANK)]):
        values[label] = drawn(probe, name, layout)
        flow.manual_seed(12345)  # OneFlow's generator is not what draws
        np.testing.assert_array_equal(drawn(probe, name, layout), values[label])
        assert not np.array_equal(drawn(probe, name, layout, step=STEP + 1), values[label]), "the step does not key it"
    if "global" in values:
        np.testing.assert_allclose(values["global"], values["local"], rtol=1e-6)  # one value, local or global
    routed.unroute_stochastic_ops()
    try:
        stock = drawn(probe, name, LOCAL)
    except RuntimeError as error:  # no CPU kernel (the fused dropouts), dropout1d/2d/3d refusing every p
        assert "Cannot find the kernel" in str(error) or "dropout probability has to be between" in str(error)
        return
    assert not np.array_equal(drawn(probe, name, LOCAL), stock), "stock draws the same values at a repeat"


@pytest.mark.parametrize("name", sorted(BROKEN_IN_ONEFLOW))
def test_tensor_methods_oneflow_cannot_run_fail_the_same_routed_or_not(routed, probe, name):
    with pytest.raises(NameError, match="data_format"):
        drawn(probe, name, LOCAL)
    routed.unroute_stochastic_ops()
    with pytest.raises(NameError, match="data_format"):
        drawn(probe, name, LOCAL)


def test_routed_results_have_oneflows_dtypes_and_shapes(routed, probe):
    routed_out = {name: drawn(probe, name, LOCAL) for name in all_cases()}
    routed.unroute_stochastic_ops()
    for name in all_cases():
        try:
            stock = drawn(probe, name, LOCAL)
        except RuntimeError:  # dropout1d/2d/3d, the fused softmax dropouts: no way to run on CPU
            continue
        assert (routed_out[name].dtype, routed_out[name].shape) == (stock.dtype, stock.shape), name


@pytest.mark.parametrize("shape, lo, hi, micro", [((32, 256), (0, 0), (32, 256), None), ((8, 6, 4), (2, 1, 0), (6, 5, 4), None),
                                                  ((16, 6), (4, 0), (12, 6), 1), ((3, 2 ** 31 + 5), (1, 2 ** 31 - 2),
                                                                                  (3, 2 ** 31 + 5), None)])
def test_the_host_computes_the_bits_of_the_tensor_ops(shape, lo, hi, micro):
    """``forward_draws.host_bits`` (numpy words, CPU draws) and ``counter_rng.local_counter_bits`` (int32
    tensor ops, any device): the same bits, slices, micro-batches of a step and indices past 2**32 alike."""
    from libai_ext.random import counter_rng, forward_draws
    from libai_ext.random.global_index import StepRows

    keys = counter_rng.stream_keys(3, "a stream", 5, 2)
    rows = None if micro is None else StepRows(2, micro)
    np.testing.assert_array_equal(forward_draws.host_bits(shape, lo, hi, keys, rows).numpy(),
                                  counter_rng.local_counter_bits(shape, lo, hi, keys, device="cpu", rows=rows).numpy())


def test_local_draws_under_data_parallelism_are_the_samples_rows_of_one_draw(probe):
    """Simulated ranks: rank r's local batch-shaped draw is rows [8r, 8r + 8) of one 32-row draw."""
    for name in ("oneflow.rand", "oneflow.Tensor.bernoulli", "oneflow.nn.functional.dropout", "oneflow.nn.FusedMLP"):
        whole = drawn(probe, name, LOCAL, 4 * ROWS, batch_rows=4 * ROWS)
        for rank in range(4):
            part = drawn(probe, name, LOCAL, ROWS, data_parallel=4, batch_rows=4 * ROWS, data_parallel_rank=rank)
            np.testing.assert_allclose(part, whole[rank * ROWS:(rank + 1) * ROWS], rtol=1e-6, err_msg=name)


def test_a_local_draw_of_the_whole_batch_is_the_same_on_every_data_parallel_rank(probe):
    whole = drawn(probe, "oneflow.rand", LOCAL, 2 * ROWS, batch_rows=2 * ROWS)
    for rank in range(2):
        np.testing.assert_array_equal(drawn(probe, "oneflow.rand", LOCAL, 2 * ROWS, data_parallel=2,
                                            batch_rows=2 * ROWS, data_parallel_rank=rank), whole)


def test_a_local_draw_that_is_not_the_batch_is_refused_under_data_parallelism(probe):
    with pytest.raises(stochastic_ops.StochasticOpError, match=r"randperm.*local tensor of shape \(12,\).*"
                                                               r"random_op_cases.py:\d+"):
        drawn(probe, "oneflow.randperm", LOCAL, data_parallel=2, batch_rows=2 * ROWS)


# ---- however the op is reached --------------------------------------------------------------------

BOUND_AT_IMPORT = '''
import oneflow as flow
from oneflow.nn.functional import dropout
from oneflow._C import dropout as c_dropout
from oneflow._C import uniform_, bernoulli_


def noisy(x):
    return uniform_(flow.empty(*x.shape), 0.0, 1.0) + bernoulli_(flow.empty(*x.shape), 0.5)


class Model(flow.nn.Module):
    def forward(self, x):
        return dropout(x, 0.5, True) + c_dropout(x, 0.3, True) + noisy(x) + x.bernoulli()
'''


def test_names_bound_at_import_tensor_methods_and_helpers_are_routed(routed, tmp_path, monkeypatch):
    """The issue's cases: the model module bound OneFlow's own functions before routing started."""
    (tmp_path / "bound_at_import_model.py").write_text(BOUND_AT_IMPORT)
    monkeypatch.syspath_prepend(str(tmp_path))
    oneflow_draws.unwatch_oneflow_draws()  # as in a fresh process: the module imports OneFlow's own
    module = importlib.import_module("bound_at_import_model")
    assert module.dropout is flow._C.dropout
    routed.route_stochastic_ops()  # wraps, and rebinds what modules imported
    assert module.dropout is not module.dropout.__wrapped__ and module.c_dropout is flow._C.dropout
    model = module.Model()
    routed.watch_model(model)
    x = flow.full((64, 64), 0.5)
    with drawing_step(3):
        first = model(x).numpy()
    flow.manual_seed(99)
    with drawing_step(3):
        np.testing.assert_array_equal(model(x).numpy(), first)
    routed.unroute_stochastic_ops()
    with drawing_step(3):
        assert not np.array_equal(model(x).numpy(), model(x).numpy())  # stock: every repeat differs


class HoldsOneFlowsOwn(flow.nn.Module):
    """Took ``rand`` before libai_ext wrapped it (an attribute; a default argument or a closure alike)."""

    def __init__(self, rand):
        super().__init__()
        self.rand = rand

    def forward(self, x):
        return x + self.rand(*x.shape)


def test_a_reference_taken_before_routing_is_refused_by_name_at_the_first_forward(routed):
    model = HoldsOneFlowsOwn(flow._C.rand.__wrapped__)
    routed.watch_model(model)
    with pytest.raises(stochastic_ops.StochasticOpError, match=r"oneflow rand at .*test_random_ops.py:\d+ \(forward\)"):
        with drawing_step(0):
            model(flow.ones(2, 2))
    fine = HoldsOneFlowsOwn(flow._C.rand)  # the name, looked up after routing: keyed
    routed.watch_model(fine)
    with drawing_step(0):
        assert fine(flow.ones(2, 2)).shape == (2, 2)


# ---- routed ops behave as OneFlow's -----------------------------------------------------------------

class TwoRates(flow.nn.Module):
    def forward(self, x):
        return flow.nn.functional.dropout(x, 0.1), flow.nn.functional.dropout(x, 0.5)


def test_two_dropout_calls_of_one_module_draw_independent_masks(routed):
    model = TwoRates()
    routed.watch_model(model)
    with drawing_step(2):
        low, high = (y.numpy() == 0 for y in model(flow.ones(400, 500)))
    n = low.size
    for dropped, p in ((low, 0.1), (high, 0.5)):
        assert abs(dropped.mean() - p) < 5 * np.sqrt(p * (1 - p) / n)
    conditional = high[low].mean()  # P(dropped at 0.5 | dropped at 0.1): 0.5 when independent
    assert abs(conditional - 0.5) < 5 * np.sqrt(0.25 / low.sum()), conditional
    streams = {layer.stream for layer in routed._streams[model].values()}
    assert len(streams) == 2, streams


class InPlace(flow.nn.Module):
    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        y = x * 1.0
        out = flow.nn.functional.dropout(y, self.p, training=True, inplace=True)
        return y, out


def test_inplace_dropout_writes_into_its_input_and_keeps_the_gradient(routed):
    model = InPlace(0.5)
    routed.watch_model(model)
    w = flow.ones(100, 100, requires_grad=True)
    with drawing_step(1):
        y, out = model(w)
    zeros = int((y.numpy() == 0).sum())
    assert abs(zeros - 5000) < 5 * 50, zeros  # stock: 5,010 in the measure
    np.testing.assert_array_equal(out.numpy(), y.numpy())
    y.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), y.detach().numpy())  # 2 where kept, 0 where dropped


@pytest.mark.parametrize("p, expected", [(0.0, "input"), (1.0, "zeros")])
def test_dropout_at_rates_zero_and_one(routed, p, expected):
    model = InPlace(p)
    routed.watch_model(model)
    x = flow.full((8, 8), 3.0)
    with drawing_step(1):
        y, _ = model(x)
    np.testing.assert_array_equal(y.numpy(), x.numpy() if expected == "input" else np.zeros((8, 8), np.float32))


class Fused(flow.nn.Module):
    def forward(self, x, bias, mask, weights, biases):
        return {
            "bias_add": flow._C.fused_bias_add_dropout(x, bias, p=0.0, axis=1),
            "mask_softmax": flow._C.fused_scale_mask_softmax_dropout(x, mask, fill_value=-1e4, scale=2.0, p=0.0),
            "bias_mask_softmax": flow._C.fused_bias_add_scale_mask_softmax_dropout(
                x, bias, mask, fill_value=-1e4, scale=0.5, p=0.0),
            "tril": flow._C.fused_scale_tril_softmax_mask_scale(x, p=0.0, diagonal=0, tril_scale_value=0.5),
            "mlp": flow._C.fused_matmul_bias_add_relu_dropout(x, weights, biases, True, [0.0, 0.0]),
        }


def softmax(a):
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_fused_ops_compute_oneflows_formulas(routed):
    rng = np.random.RandomState(0)
    x, bias = rng.randn(4, 6).astype(np.float32), rng.randn(6).astype(np.float32)
    mask = rng.rand(4, 6) > 0.3
    weights = [rng.randn(5, 6).astype(np.float32), rng.randn(3, 5).astype(np.float32)]
    biases = [rng.randn(5).astype(np.float32), rng.randn(3).astype(np.float32)]
    model = Fused()
    routed.watch_model(model)
    args = [flow.tensor(a) for a in (x, bias, mask)] + [[flow.tensor(w) for w in weights],
                                                         [flow.tensor(b) for b in biases]]
    with drawing_step(0):
        out = {k: (v[1] if isinstance(v, tuple) else v).numpy() for k, v in model(*args).items()}
    routed.unroute_stochastic_ops()  # OneFlow's own kernels where the CPU has them
    np.testing.assert_allclose(out["bias_add"], flow._C.fused_bias_add_dropout(*args[:2], p=0.0, axis=1).numpy())
    np.testing.assert_allclose(out["mlp"], flow._C.fused_matmul_bias_add_relu_dropout(
        args[0], args[3], args[4], True, [0.0, 0.0]).numpy(), rtol=1e-5)
    # No CPU kernel: OneFlow's own tests state the formula.
    masked = np.where(mask, x * 2.0, -1e4)
    np.testing.assert_allclose(out["mask_softmax"], softmax(masked), rtol=1e-5)
    np.testing.assert_allclose(out["bias_mask_softmax"], softmax(np.where(mask, (x + bias) * 0.5, -1e4)), rtol=1e-5)
    np.testing.assert_allclose(out["tril"], softmax(np.where(np.tril(np.ones((4, 6))) > 0, x * 0.5, 0.0)), rtol=1e-5)


class Gumbel(flow.nn.Module):
    def forward(self, x, hard):
        return flow.nn.functional.gumbel_softmax(x, tau=0.5, hard=hard)


def test_gumbel_softmax_samples_like_oneflows(routed):
    """Soft: sums to 1 over OneFlow's implicit dim (1 for a 4-D input); hard: one-hot there, with the soft
    sample's gradient; and each class wins as often as its probability says."""
    model = Gumbel()
    routed.watch_model(model)
    logits = np.tile(np.log(np.array([0.1, 0.2, 0.7], np.float32)).reshape(1, 3, 1, 1), (4000, 1, 2, 2))
    x = flow.tensor(logits, requires_grad=True)
    with drawing_step(0):
        soft, hard = model(x, False), model(x, True)
    np.testing.assert_allclose(soft.numpy().sum(1), 1.0, rtol=1e-5)
    assert set(np.unique(hard.numpy())) == {0.0, 1.0} and np.all(hard.numpy().sum(1) == 1.0)
    wins = hard.numpy().mean(axis=(0, 2, 3))
    for won, p in zip(wins, (0.1, 0.2, 0.7)):
        assert abs(won - p) < 5 * np.sqrt(p * (1 - p) / (4000 * 4)), wins
    (hard * flow.arange(3, dtype=flow.float32).reshape(1, 3, 1, 1)).sum().backward()
    assert np.abs(x.grad.numpy()).sum() > 0
    routed.unroute_stochastic_ops()
    stock = flow.nn.functional.gumbel_softmax(x.detach(), tau=0.5)
    np.testing.assert_allclose(stock.numpy().sum(1), 1.0, rtol=1e-5)  # the same implicit dim


def test_draws_follow_their_distributions(probe):
    rows = 4000  # 24,000 values each
    checks = {
        "oneflow.rand": (0.5, 1 / 12), "oneflow._C.randn": (0.0, 1.0), "oneflow._C.normal": (1.0, 4.0),
        "oneflow._C.uniform_": (0.5, 0.75), "oneflow._C.exponential_": (0.5, 0.25),
        "oneflow._C.bernoulli": (0.3, 0.21), "oneflow.randint": (3.0, 4.0),
    }
    for name, (mean, variance) in checks.items():
        values = drawn(probe, name, LOCAL, rows).astype(np.float64).ravel()
        assert abs(values.mean() - mean) < 5 * np.sqrt(variance / values.size), (name, values.mean())
        assert abs(values.var() / variance - 1) < 0.05, (name, values.var())
    perm = drawn(probe, "oneflow.randperm", LOCAL)
    assert sorted(perm.tolist()) == list(range(12))


# ---- refused by name ------------------------------------------------------------------------------

class Refused(flow.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = flow.nn.LSTM(4, 4, 2, dropout=0.5, batch_first=True)
        self.quiet = flow.nn.GRU(4, 4, 2, batch_first=True)

    def forward(self, op, x):
        if op == "lstm":
            return self.lstm(x)[0]
        if op == "gru":
            return self.quiet(x)[0]
        if op == "multinomial":
            return flow.multinomial(x.reshape(-1, 4).softmax(-1), 1)
        if op == "dispatch_coin_flip":
            return flow._C.dispatch_coin_flip(None, batch_size=2)
        return getattr(flow._C, op)(x)


@pytest.mark.parametrize("op", ["lstm", "multinomial", "dispatch_coin_flip", "one_embedding_lookup"])
def test_refused_ops_are_named_with_their_line(routed, op, caplog):
    from libai_ext import seed_everything

    model = Refused()
    routed.watch_model(model)
    x = flow.rand(2, 3, 4)
    with pytest.raises(stochastic_ops.StochasticOpError, match=rf"oneflow {op}.*test_random_ops.py:\d+ \(forward\)"):
        with drawing_step(0):
            model(op, x)
    seed_everything(SEED, randomness="fast")
    with caplog.at_level(logging.WARNING):
        try:
            with drawing_step(0):
                model(op, x)
        except Exception:  # OneFlow's own op, given this test's placeholder arguments
            pass
    assert f"oneflow {op}" in caplog.text and "train.randomness='fast'" in caplog.text


def test_rnns_run_where_they_do_not_drop(routed):
    model = Refused()
    routed.watch_model(model)
    with drawing_step(0):
        assert model("gru", flow.rand(2, 3, 4)).shape == (2, 3, 4)  # no dropout
    model.eval()
    with drawing_step(0):
        assert model("lstm", flow.rand(2, 3, 4)).shape == (2, 3, 4)  # not training


def test_the_audit_names_every_oneflow_module_that_reaches_a_refused_op():
    modules = {cls.__name__ for cls in refused_modules()}
    assert {"LSTM", "GRU", "RNN", "CoinFlip", "OFRecordReader", "RawReader", "COCOReader"} <= modules
    assert not modules & {"Dropout", "Dropout2d", "FusedMLP"}  # routed
    with pytest.raises(StochasticModelError, match=r"lstm: a oneflow.nn.LSTM module"):
        audit_stochastic_ops(Refused(), "layout_invariant")


class Student(flow.nn.Module):
    def __init__(self, teacher=None):
        super().__init__()
        self.drop = flow.nn.Dropout(0.5)
        self._teacher = [teacher] if teacher is not None else []  # held outside the module tree

    def forward(self, x):
        out = flow.nn.functional.dropout(x, 0.5)
        for teacher in self._teacher:
            out = out + teacher(x)
        return out


def test_a_module_of_no_watched_model_drawing_inside_a_forward_is_refused(routed):
    teacher = Student()
    student = Student(teacher)
    routed.watch_model(student)
    with pytest.raises(stochastic_ops.StochasticOpError, match="Student, a module of no watched model"):
        with drawing_step(0):
            student(flow.ones(4, 4))


def test_models_with_the_same_names_draw_apart_once_the_second_has_a_place(routed):
    from libai_ext.random.layers import convert_stochastic_layers, name_stochastic_layers

    models = []
    for _ in range(2):
        model = Student()
        convert_stochastic_layers(model)
        name_stochastic_layers(model)
        models.append(model)
    student, teacher = models
    assert routed.watch_model(student) == ""
    assert student.drop.stream == "drop"  # the trainer's model keeps its names
    routed.watch_model(teacher)
    x = flow.ones(32, 32)
    with drawing_step(0):
        student(x)
        with pytest.raises(stochastic_ops.StochasticOpError, match="same names"):
            teacher(x)
    assert routed.watch_model(teacher, place="teacher") == "teacher/"
    assert teacher.drop.stream == "teacher/drop"
    with drawing_step(1):
        a, b = student(x).numpy(), teacher(x).numpy()
        da, db = student.drop(x).numpy(), teacher.drop(x).numpy()
    assert not np.array_equal(a, b) and not np.array_equal(da, db)


# ---- keyed augmentation ---------------------------------------------------------------------------

class DrawsThroughEveryOp(flow.utils.data.Dataset):
    """A sample drawn through each op a dataset can call (out of any forward: OneFlow's own ops)."""

    def __len__(self):
        return 16

    def __getitem__(self, index):
        x = flow.full((4, 6), 0.5)
        values = [flow.rand(4), flow.randn(4), flow.randint(0, 9, (4,)).float(), flow.randperm(4).float(),
                  flow.normal(0.0, 1.0, (4,)), flow.bernoulli(x).flatten()[:4], x.bernoulli().flatten()[:4],
                  flow._C.uniform_(flow.empty(4), 0.0, 1.0), flow._C.bernoulli_(flow.empty(4), 0.5),
                  flow.empty(4).normal_(), flow.empty(4).exponential_(), flow.randn_like(x).flatten()[:4],
                  flow.randint_like(x, 5).float().flatten()[:4],
                  flow.nn.functional.gumbel_softmax(x, 1.0).flatten()[:4],
                  flow.nn.functional.dropout(x, 0.5).flatten()[:4]]
        return float(index) + flow.cat(values).numpy()


def test_keyed_augmentation_gives_a_sample_the_same_draws_whatever_the_read_order():
    from libai_ext.data import KeyedAugmentation
    from libai_ext.random.global_order import EpochBatch

    keyed = KeyedAugmentation(DrawsThroughEveryOp(), seed=3)
    first = keyed[EpochBatch([4, 9, 2], epoch=0)]
    again = keyed[EpochBatch([2, 7, 9, 4], epoch=0)]
    for a, b in ((first[0], again[3]), (first[1], again[2]), (first[2], again[0])):
        np.testing.assert_array_equal(a, b)
    # Unkeyed, the same sample's draws depend on what was read before it.
    plain = DrawsThroughEveryOp()
    flow.manual_seed(0)
    assert not np.array_equal(plain[4], [plain[9], plain[4]][1])


def _batches(keyed, starts, epoch=0):
    from libai_ext.random.global_order import EpochBatch

    return [keyed[EpochBatch(list(range(start, start + 8)), epoch=epoch)] for start in starts]


class SometimesOneFlow(flow.utils.data.Dataset):
    """numpy noise on every sample; from index 40 on, OneFlow noise too, through ``draw(index)``."""

    def __init__(self, draw):
        self.draw = draw

    def __len__(self):
        return 64

    def __getitem__(self, index):
        value = float(np.random.rand())
        if index >= 40:
            value += self.draw(index)
        return value


def _through_wrapped_ops(index):  # a helper reaching OneFlow's ops by a Tensor method and by flow._C
    x = flow._C.uniform_(flow.empty(2), 0.0, 1.0) if index % 2 else flow.full((2,), 0.5).bernoulli()
    return float(x.sum().numpy())


def _through_an_unwrapped_reference(index, rand=getattr(flow._C.rand, "__wrapped__", flow._C.rand)):
    return float(rand(1).numpy()[0])  # OneFlow's own rand, held by a default argument: no call to hear


STARTS = (0, 8, 16, 40, 48)


def test_keyed_augmentation_hears_a_oneflow_draw_at_the_call_and_touches_nothing_before(monkeypatch):
    """The main process reads with OneFlow unkeyed, and without looking at its generator (which waits for the
    rank's queued work) after the epoch's first batch; the first batch that draws, through a Tensor method
    or ``oneflow._C`` in a helper, is read again with OneFlow keyed, and so are the later ones: every value is
    that of the same dataset keyed in full."""
    from libai_ext.data import KeyedAugmentation
    from libai_ext.random import keyed_dataset

    touches = []
    for module, name in ((keyed_dataset, "seed_oneflow_probe"), (keyed_dataset, "finish_queued_draws")):
        original = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _f=original, _n=name, **k: touches.append(_n) or _f(*a, **k))
    learning = KeyedAugmentation(SometimesOneFlow(_through_wrapped_ops), 3)
    in_full = KeyedAugmentation(SometimesOneFlow(_through_wrapped_ops), 3)
    in_full.draws_from_oneflow = True
    seen, touched = [], []
    for start in STARTS:
        touches.clear()
        assert _batches(learning, [start]) == _batches(in_full, [start]), start
        seen.append(learning.draws_from_oneflow)
        touched.append("seed_oneflow_probe" in touches)
    assert seen == [False, False, False, True, True]
    assert touched == [True, False, False, False, False]  # the generator's state: the epoch's first batch only
    fresh = KeyedAugmentation(SometimesOneFlow(_through_wrapped_ops), 3)
    _batches(fresh, [0])
    touches.clear()
    _batches(fresh, [8, 16])
    assert touches == []  # batches that draw nothing from OneFlow: OneFlow untouched, nothing waited for


def test_keyed_augmentation_sees_an_unreported_draw_in_the_generator_state():
    """A reference to OneFlow's own ``rand`` taken before the wrappers draws with no call to hear: in a loader
    worker every batch's generator state shows it, from the batch it starts in."""
    from libai_ext.data import KeyedAugmentation
    from libai_ext.random.global_order import EpochBatch

    batches = [EpochBatch(list(range(start, start + 8)), epoch=0) for start in STARTS]
    in_worker = flow.utils.data.DataLoader(KeyedAugmentation(SometimesOneFlow(_through_an_unwrapped_reference), 3),
                                           sampler=batches, batch_size=None, num_workers=1,
                                           collate_fn=lambda batch: batch)  # (a list of floats, as read)
    in_full = KeyedAugmentation(SometimesOneFlow(_through_an_unwrapped_reference), 3)
    in_full.draws_from_oneflow = True
    read = [list(map(float, batch)) for batch in in_worker]
    assert len(read) == len(STARTS)
    assert read == [in_full[batch] for batch in batches]


def test_keyed_augmentation_in_the_main_process_checks_the_state_at_each_epoch_and_warns(caplog):
    """In the main process the state is checked on each epoch's first batch: an unreported draw that starts
    mid-epoch is seen when an epoch's first batch draws, keyed from there on, with a warning that names the
    batches read without the check."""
    from libai_ext.data import KeyedAugmentation

    learning = KeyedAugmentation(SometimesOneFlow(_through_an_unwrapped_reference), 3)
    in_full = KeyedAugmentation(SometimesOneFlow(_through_an_unwrapped_reference), 3)
    in_full.draws_from_oneflow = True
    _batches(learning, STARTS)  # epoch 0: its first batch draws nothing, 40 and 48 draw unheard
    assert not learning.draws_from_oneflow
    next_epoch = (40, 0, 8, 16, 48)  # its first batch draws
    with caplog.at_level(logging.WARNING, logger="libai_ext.random.keyed_dataset"):
        assert _batches(learning, next_epoch, epoch=1) == _batches(in_full, next_epoch, epoch=1)
    assert learning.draws_from_oneflow
    warned = [r.getMessage() for r in caplog.records if "wrappers do not see" in r.getMessage()]
    assert len(warned) == 1 and "the 4 batch(es)" in warned[0], warned


# ---- on 4 ranks -----------------------------------------------------------------------------------

# The 4-rank launch runs OneFlow's ops and libai_ext's routing on placements of its own (no LiBai code): the LiBai line
# cannot change what it draws, so it runs on 0.1.1 (quick tier) and not in make test-libai-main, which runs this file's
# quick tier on LiBai main (long there: outside LIBAI_MAIN_LONG_TESTS).
ON_LIBAI_0_1 = pytest.mark.long if libai_line() is libai_main else (lambda test: test)


@pytest.fixture(scope="module")
def four_ranks():
    result = launch(rank_script("random_ops.py"), 4, [], timeout=900)
    by_rank = records_of_every_rank(result)
    assert by_rank[3][-1]["mode"] == "done", "rank 3 did not finish"
    return by_rank


def one_rank_reference(probe, mode):
    """What 1 rank draws: global cases on a 1-rank placement, data-parallel ones as one 32-row local draw."""
    from libai_ext import seed_everything

    seed_everything(SEED)
    stochastic_ops.route_stochastic_ops() if mode == "routed" else stochastic_ops.unroute_stochastic_ops()
    reference = {}
    for name in all_cases():
        flow.manual_seed(0)
        try:
            if name in CASES:
                reference[(name, "global")] = drawn(probe, name, ONE_RANK)
            flow.manual_seed(0)
            reference[(name, "local")] = drawn(probe, name, LOCAL, 4 * ROWS, batch_rows=4 * ROWS)
        except Exception:
            pass
    stochastic_ops.route_stochastic_ops()
    return reference


@ON_LIBAI_0_1
def test_on_four_ranks_every_layout_draws_what_one_rank_draws(four_ranks, probe):
    reference = one_rank_reference(probe, "routed")
    checked = 0
    for record in four_ranks[0]:
        if record["mode"] != "routed" or record["layout"] == "local:dp4":
            continue
        assert record["error"] is None, record
        np.testing.assert_allclose(np.asarray(record["values"]), reference[(record["case"], "global")], rtol=1e-6,
                                   atol=1e-7, err_msg=f"{record['case']} on {record['layout']}")
        checked += 1
    assert checked == 6 * len(CASES)
    for name in all_cases():
        rows = []
        for rank in range(4):
            record = next(r for r in four_ranks[rank] if (r["mode"], r["layout"], r["case"]) ==
                          ("routed", "local:dp4", name))
            if "randperm" in name:  # not the batch: refused under data parallelism
                assert "StochasticOpError" in record["error"], record
                break
            if name in FAN_SCALED:
                break
            assert record["error"] is None, record
            rows.append(np.asarray(record["values"]))
        else:
            np.testing.assert_allclose(np.concatenate(rows), reference[(name, "local")], rtol=1e-6, atol=1e-7,
                                       err_msg=f"{name}, data parallel")


@ON_LIBAI_0_1
def test_on_four_ranks_stock_draws_differ_from_one_rank_or_fail(four_ranks, probe):
    """Stock OneFlow, each rank seeded with seed + rank: 1 rank's values on no layout, except randint_like
    (OneFlow draws its whole tensor from one seed)."""
    reference = one_rank_reference(probe, "stock")
    same_everywhere = []
    for name in CASES:
        records = [r for r in four_ranks[0] if (r["mode"], r["case"]) == ("stock", name) and r["layout"] != "local:dp4"]
        assert len(records) == 6
        differs = [r["layout"] for r in records if r["error"] is not None or (name, "global") not in reference
                   or not np.allclose(np.asarray(r["values"]), reference[(name, "global")])]
        if not differs:
            same_everywhere.append(name)
    assert same_everywhere == ["oneflow._C.randint_like", "oneflow.randint_like"]


class WrongArguments(flow.nn.Module):
    def forward(self, x):
        return flow.nn.functional.dropout(x, 0.5, True, False, None, None, 7)


def test_a_call_oneflow_refuses_gets_oneflows_own_error(routed):
    model = WrongArguments()
    routed.watch_model(model)
    with pytest.raises(TypeError, match="dropout\\(\\): takes"):
        with drawing_step(0):
            model(flow.ones(2, 2))


class UnscaledMaskSoftmax(flow.nn.Module):
    """LiBai's attention with ``scale_mask_softmax_fusion`` on and ``apply_query_key_layer_scaling`` off passes
    ``scale=None`` (LiBai's SimCSE config does, with an int64 mask)."""

    def __init__(self, scale, mask_dtype):
        super().__init__()
        self.scale, self.mask_dtype = scale, mask_dtype

    def forward(self, x):
        mask = flow.ones(x.shape, dtype=self.mask_dtype)
        return flow._C.fused_scale_mask_softmax_dropout(x, mask, fill_value=-1e4, scale=self.scale, p=0.1)[0]


@pytest.mark.parametrize("scale, mask_dtype, error", [
    (None, flow.bool, "argument 'scale' must be float"), (1.0, flow.int64, "Expected kBool, but got kInt64")])
def test_fused_softmax_arguments_oneflow_refuses_get_oneflows_error_routed_or_not(routed, scale, mask_dtype, error):
    model = UnscaledMaskSoftmax(scale, mask_dtype)
    with pytest.raises((TypeError, RuntimeError), match=error):  # stock: before any kernel is looked for
        model(flow.ones(2, 3))
    routed.watch_model(model)
    with pytest.raises((TypeError, RuntimeError), match=error):
        with drawing_step(0):
            model(flow.ones(2, 3))
