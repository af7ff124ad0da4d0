"""Initial weights from the seed alone (train.randomness="layout_invariant", libai_ext.random.param_init).

In-process (local tensors):

* the recorded recipes reproduce what the model's code asked for (distributions, fans,
  constants, tied weights), the values depend on the seed and names only;
* a copy of a random tensor follows its source, value for value, after the re-draw
  (``copy.deepcopy`` of a module, ``clone``, ``Parameter(t.clone())``, ``detach().clone()``,
  ``load_state_dict``, out-of-place value ops, ``flow.cat``, slices and views), and adding it
  does not change its source;
* what cannot be reproduced is refused, naming the tensor and the call site (draws it cannot
  redo, ops it does not replay: a product, a norm; copies through numpy);
* parameters created after the build (in forward) are refused (layout_invariant) or warned
  about (fast) by name;
* a trainer's own ``build_model`` not calling ours (LiBai main's LLM projects: a loader builds the model and
  loads its weights, a LoRA adapter is added) gets the model-side work: the loaded weights stay the file's, the
  adapter's init is re-drawn, its dropout converted; a model replaced after ``build_model`` is refused.

Multi-rank, two launches in the quick tier: one rank, and 4 ranks going through tp2 x pp2 and
dp2 x tp2 in turn (rank_scripts/param_init.py sets LiBai's layout up again for each).  On every
layout, configs/demo_swin_digits_cpu.py's model built as ConsistentBatchTrainer builds it has
bit-identical initial weights (every parameter and buffer) to 1 rank, while the same builds without the re-draw
(train.randomness="fast", and stock LiBai's DefaultTrainer) differ on the tensor-parallel ones;
LiBai's own GPT, BERT, ViT and T5 (tiny) are bit-identical too; and a LiBai ViT's EMA teacher
(copy.deepcopy) and a load_state_dict copy equal their student on every layout, as ``w * 0.5``
and ``flow.cat([w, w])`` of its tensor-parallel weight ``w`` equal those ops on ``w``; the project trainer's
model (loaded ViT, LoRA adapter) is bit-identical too, its loaded weights the file's.  The long tier
adds tp2, pp2 and dp2 alone (one 2-rank launch).
"""
import copy
import functools
import logging
import math
import os
import tempfile
import threading
import types

import numpy as np
import oneflow as flow
import pytest
from flowvision.layers import trunc_normal_
from oneflow import nn

from conftest import rank_script, records_of_every_rank
from libai_ext.compat import libai_line, libai_main
from libai_ext.random import build_with_seeded_init, recording_init, reinitialize, watch_late_parameters
from libai_ext.testing import launch


class Tiny(nn.Module):
    """Every init path the recorder knows, on local tensors; ``reverse`` builds in another order."""

    def __init__(self, reverse=False, big=False):
        super().__init__()
        builders = [self._conv, self._linear, self._table, self._constants]
        for build in reversed(builders) if reverse else builders:
            build(big)
        self.head = self.fc  # tied: one tensor under two names

    def _conv(self, big):
        self.conv = nn.Conv2d(3, 8, 3)  # kaiming_uniform_(a=sqrt(5)) weight, uniform_ bias from the fan

    def _linear(self, big):
        self.fc = nn.Linear(512 if big else 16, 512 if big else 8)
        nn.init.xavier_normal_(self.fc.weight)
        nn.init.zeros_(self.fc.bias)

    def _table(self, big):
        self.table = nn.Parameter(flow.zeros(256 if big else 9, 256 if big else 4))
        trunc_normal_(self.table, std=0.02)  # flowvision: uniform_, erfinv_, mul_, add_, clamp_
        self.narrow = nn.Parameter(flow.zeros(256 if big else 5, 64 if big else 3))
        trunc_normal_(self.narrow, std=1.0, a=-0.5, b=0.5)
        self.embedding = nn.Parameter(flow.randn(30, 20) if not big else flow.randn(8, 8))  # Parameter(t)
        self.emb_scaled = nn.Parameter(flow.empty(64, 64))
        self.emb_scaled.data.normal_(mean=1.0, std=0.5)  # through .data: another object, the same memory

    def _constants(self, big):
        self.scale = nn.Parameter(flow.ones(7))
        self.overwritten = nn.Parameter(flow.empty(6))
        self.overwritten.data.normal_()
        nn.init.constant_(self.overwritten, 0.25)  # a random draw, then a constant: a constant


def state(model):
    # copies: numpy() may share the memory of a tensor that is freed with the model
    return {name: p.numpy().copy() for name, p in model.state_dict().items()}


def seeded(seed, reverse=False, generator_seed=0, big=False):
    flow.manual_seed(generator_seed)
    model, redrawn = build_with_seeded_init(lambda: Tiny(reverse, big), seed)
    return state(model), redrawn


def test_values_depend_on_seed_and_names_only():
    first, redrawn = seeded(7)
    again, _ = seeded(7, reverse=True, generator_seed=123)  # other build order, other generator state
    other, _ = seeded(8)
    assert sorted(redrawn) == ["conv.bias", "conv.weight", "emb_scaled", "embedding", "fc.weight", "narrow",
                               "table"]
    assert sorted(first) == sorted(again)
    random = set(redrawn) | {"head.weight"}  # the tied name shares fc.weight's value
    for name in first:
        np.testing.assert_array_equal(first[name], again[name], err_msg=name)
        if name in random:
            assert not np.array_equal(first[name], other[name]), name
        else:
            np.testing.assert_array_equal(first[name], other[name], err_msg=name)
    np.testing.assert_array_equal(first["fc.bias"], 0.0)
    np.testing.assert_array_equal(first["overwritten"], 0.25)
    np.testing.assert_array_equal(first["scale"], 1.0)
    np.testing.assert_array_equal(first["head.weight"], first["fc.weight"])


def test_without_the_redraw_values_follow_the_generator():
    # What the re-draw removes: OneFlow's own init changes with its generator state.
    flow.manual_seed(0)
    a = Tiny().fc.weight.numpy()
    flow.manual_seed(1)
    assert not np.array_equal(a, Tiny().fc.weight.numpy())


def test_distributions_are_the_ones_the_model_asked_for():
    values, _ = seeded(3, big=True)
    std = values["fc.weight"].std()
    assert abs(std - math.sqrt(2.0 / 1024)) < 0.02 * std  # xavier_normal_: fan from the whole shape
    assert abs(values["fc.weight"].mean()) < 0.01 * std
    bound = 1.0 / math.sqrt(3 * 9)  # Conv2d: kaiming_uniform_(a=sqrt(5)) -> 1/sqrt(fan_in)
    assert np.abs(values["conv.weight"]).max() <= bound
    assert np.abs(values["conv.weight"]).max() > 0.9 * bound
    assert np.abs(values["conv.bias"]).max() <= bound
    table = values["table"]
    assert abs(table.std() - 0.02) < 0.02 * 0.02 and np.abs(table).max() < 0.02 * 6.7
    narrow = values["narrow"]  # truncated to [-0.5, 0.5] at unit std: std 0.2876
    assert np.abs(narrow).max() <= 0.5 and abs(narrow.std() - 0.2876) < 0.01
    emb = values["emb_scaled"]
    assert abs(emb.mean() - 1.0) < 0.02 and abs(emb.std() - 0.5) < 0.02


# -- copies of a random tensor ------------------------------------------------------------------

class Student(nn.Module):
    """Parameters and a buffer from several init paths, one tied pair."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)
        self.conv = nn.Conv2d(2, 3, 3)
        self.table = nn.Parameter(flow.zeros(5, 3))
        trunc_normal_(self.table, std=0.02)
        self.register_buffer("noise", flow.randn(3))
        self.head = self.fc


class WithEMATeacher(nn.Module):
    """As MoCo, BYOL and DINO make their momentum/EMA encoder."""

    def __init__(self):
        super().__init__()
        self.student = Student()
        self.teacher = copy.deepcopy(self.student)


class WithLoadedCopy(nn.Module):
    def __init__(self):
        super().__init__()
        self.student = Student()
        self.teacher = Student()  # its own draws, replaced by the student's values
        self.teacher.load_state_dict(self.student.state_dict())


class StudentOnly(nn.Module):
    def __init__(self):
        super().__init__()
        self.student = Student()


@pytest.mark.parametrize("module", [WithEMATeacher, WithLoadedCopy], ids=["deepcopy", "load_state_dict"])
def test_a_copied_module_equals_its_source_after_the_redraw(module):
    flow.manual_seed(0)
    model, redrawn = build_with_seeded_init(module, 5)
    values = state(model)
    student = {name[len("student."):]: value for name, value in values.items() if name.startswith("student.")}
    assert sorted(student) == ["conv.bias", "conv.weight", "fc.bias", "fc.weight", "head.bias", "head.weight",
                               "noise", "table"]
    for name, value in student.items():
        np.testing.assert_array_equal(values[f"teacher.{name}"], value, err_msg=name)
    # Every random tensor of the teacher was re-drawn, following the student's name.
    assert sorted(n for n in redrawn if n.startswith("teacher.")) == [
        "teacher.conv.bias", "teacher.conv.weight", "teacher.fc.bias", "teacher.fc.weight", "teacher.noise",
        "teacher.table"]
    assert all(redrawn[n].endswith(f"(follows student.{n[len('teacher.'):]})") for n in redrawn if "teacher" in n)
    # The teacher changes nothing of the student: the same values as without it ...
    flow.manual_seed(1)
    alone = state(build_with_seeded_init(StudentOnly, 5)[0])
    for name, value in alone.items():
        np.testing.assert_array_equal(values[name], value, err_msg=name)
    # ... which came from the seed: another seed, other values.
    other = state(build_with_seeded_init(module, 6)[0])
    assert not np.array_equal(other["teacher.fc.weight"], values["teacher.fc.weight"])


class Copied(nn.Module):
    """``self.source`` drawn, ``self.copy = make(source)`` (a parameter, or a buffer with ``buffer``)."""

    def __init__(self, make, buffer=False):
        super().__init__()
        self.source = nn.Parameter(flow.empty(4, 6))
        nn.init.normal_(self.source, std=0.5)
        made = make(self.source)
        if buffer:
            self.register_buffer("copy", made)
        else:
            self.copy = nn.Parameter(made)


# (id, how the model's code makes the copy, the same op on the final source values)
FOLLOWING = [
    ("clone", lambda w: w.clone(), lambda w: w),
    ("parameter_of_detach_clone", lambda w: w.detach().clone(), lambda w: w),
    ("data_clone", lambda w: w.data.clone(), lambda w: w),
    ("tensor_deepcopy", lambda w: copy.deepcopy(w.detach()), lambda w: w),
    ("times_half", lambda w: w * 0.5, lambda w: w * 0.5),
    ("half_times", lambda w: 0.5 * w, lambda w: w * 0.5),
    ("one_minus", lambda w: 1 - w, lambda w: 1 - w),
    ("divided_plus", lambda w: w / 3 + 1, lambda w: w / 3 + 1),
    ("negated_clamped", lambda w: (-w).clamp(-0.5, 0.5), lambda w: (-w).clamp(-0.5, 0.5)),
    ("cat", lambda w: flow.cat([w, w]), lambda w: flow.cat([w, w])),
    ("stack_of_slices", lambda w: flow.stack([w[0], w[1]]), lambda w: flow.stack([w[0], w[1]])),
    ("slice", lambda w: w[1:3, ::2], lambda w: w[1:3, ::2]),
    ("ellipsis", lambda w: w[...], lambda w: w),
    ("transpose", lambda w: w.t(), lambda w: w.t()),
    ("property_T", lambda w: w.T, lambda w: w.t()),
    ("reshape", lambda w: w.reshape(-1).clone(), lambda w: w.reshape(-1)),
    ("view_chunk", lambda w: w.view(2, 12).chunk(2)[1], lambda w: w.view(2, 12)[1:]),
    ("cast", lambda w: w.double(), lambda w: w.double()),
    ("keyword_tensors", lambda w: flow.mul(w, other=w).masked_fill(mask=flow.eye(4, 6).bool(), value=0.0),
     lambda w: (w * w).masked_fill(flow.eye(4, 6).bool(), 0.0)),
    ("masked_by_itself", lambda w: w.masked_fill(mask=w > 0, value=0.0) + flow.where(flow.lt(w, -0.5), w, 0.0),
     lambda w: w.masked_fill(w > 0, 0.0) + flow.where(w < -0.5, w, 0.0)),
]


@pytest.mark.parametrize("make, same", [case[1:] for case in FOLLOWING], ids=[case[0] for case in FOLLOWING])
def test_a_copy_or_exact_derivation_follows_its_source(make, same):
    flow.manual_seed(0)
    model, redrawn = build_with_seeded_init(lambda: Copied(make), 11)
    with flow.no_grad():
        expected = same(model.source.detach()).numpy()
    np.testing.assert_array_equal(model.copy.numpy(), expected)
    assert redrawn["copy"].endswith("(follows source)"), redrawn["copy"]
    # The source is what it is without the copy.
    flow.manual_seed(1)
    alone = build_with_seeded_init(lambda: Copied(lambda w: flow.zeros(1)), 11)[0]
    np.testing.assert_array_equal(model.source.numpy(), alone.source.numpy())


class InPlaceOperator(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(flow.empty(64, 64))
        nn.init.normal_(self.weight)
        values = self.weight.data
        values *= 0.5  # Tensor.__imul__: an in-place op like mul_
        values -= 1.0


def test_in_place_operators_are_replayed():
    model, redrawn = build_with_seeded_init(InPlaceOperator, 2)
    assert redrawn["weight"] == "normal(0, 1).mul_.sub_"
    weight = model.weight.numpy()
    assert abs(weight.std() - 0.5) < 0.02 and abs(weight.mean() + 1.0) < 0.02


def test_a_buffer_copy_follows_too():
    model, redrawn = build_with_seeded_init(lambda: Copied(lambda w: w.clone() * 2, buffer=True), 11)
    np.testing.assert_array_equal(model.copy.numpy(), model.source.numpy() * 2)


def test_a_tensor_made_of_two_draws_gets_two_streams():
    model, redrawn = build_with_seeded_init(
        lambda: Copied(lambda w: flow.cat([flow.randn(2, 6), flow.randn(2, 6)]) + 0 * w), 11)
    both = model.copy.numpy()
    assert not np.array_equal(both[:2], both[2:])


# (id, how the model's code makes the tensor, what the refusal must say besides the name)
REFUSED = [
    ("matmul", lambda w: w @ w.t(), "copy (parameter 'copy' of the model: Copied): Tensor.__matmul__ of a random tensor at "),
    ("normalised", lambda w: w / w.norm(), "copy (parameter 'copy' of the model: Copied): Tensor.__truediv__ at "),
    ("sum", lambda w: w.sum(0), "copy (parameter 'copy' of the model: Copied): Tensor.sum of a random tensor at "),
    ("through_numpy", lambda w: flow.tensor(w.numpy()), "copy: holds exactly the initial values of source"),
    ("randint_clone", lambda w: flow.randint(0, 3, (4, 6)).float().clone(), "copy (parameter 'copy' of the model: Copied): Tensor.float at "),
]


@pytest.mark.parametrize("make, message", [case[1:] for case in REFUSED], ids=[case[0] for case in REFUSED])
def test_a_derivation_that_is_not_replayed_is_refused_by_name(make, message):
    with pytest.raises(RuntimeError, match="cannot reproduce") as error:
        build_with_seeded_init(lambda: Copied(make), 0)
    assert message in str(error.value)
    if "holds exactly" not in message:
        assert f"{__file__}:" in str(error.value) and "(<lambda>)" in str(error.value)  # the call site


class InPlaceThroughAView(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(flow.empty(4, 4))
        nn.init.normal_(self.weight)
        rows = self.weight.data[:2]
        self.rows = nn.Parameter(rows.clone())
        rows.mul_(2)  # changes the weight's memory too: its recipe does not say so


class DrawOnAnotherThread(nn.Module):
    """A thread drawing while the model is built (e.g. a loader's): not part of the model's init."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        thread = threading.Thread(target=lambda: flow.randn(8))
        thread.start()
        thread.join()


def test_in_place_ops_through_a_view_are_refused_and_other_threads_are_not_recorded():
    with pytest.raises(RuntimeError, match=r"weight \(parameter 'weight' of the model: InPlaceThroughAView\): "
                                           "replaying normal"):
        build_with_seeded_init(InPlaceThroughAView, 0)
    # strict without a rebuild: a draw recorded on the other thread would be a stray draw, refused
    with recording_init() as recorder:
        model = DrawOnAnotherThread()
    assert sorted(reinitialize(model, recorder, 0)) == ["fc.bias", "fc.weight"]


class Orthogonal(nn.Module):
    def __init__(self):
        super().__init__()
        self.rotation = nn.Parameter(flow.empty(4, 4))
        nn.init.orthogonal_(self.rotation)


class UnwatchedOp(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(flow.empty(4, 4))
        self.weight.data.normal_()
        nn.functional.relu(self.weight.data, inplace=True)  # an in-place op the recorder does not watch


class StrayDraw(nn.Module):
    def __init__(self):
        super().__init__()
        drawn = flow.randn(4, 4)
        self.weight = nn.Parameter(flow.tensor(drawn.numpy()))  # through numpy: the draw's path is lost


class DerivedThroughNumpy(nn.Module):
    def __init__(self):
        super().__init__()
        scaled = flow.randn(4, 4) * 2.0
        self.weight = nn.Parameter(flow.tensor(scaled.numpy()))  # a random value's path lost after an op


class FanOfARandomTensor(nn.Module):
    """Reads an old draw (as torch-style fan helpers do, ``w[0][0].numel()``), then draws again: fine."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(flow.empty(4, 6))
        nn.init.normal_(self.weight)
        fan_in = self.weight.size(1) * self.weight[0][0].numel()
        nn.init.normal_(self.weight, std=fan_in ** -0.5)


def test_reading_an_old_draw_before_drawing_again_is_no_stray_draw():
    _, redrawn = build_with_seeded_init(FanOfARandomTensor, 0)
    assert redrawn == {"weight": f"normal(0, {6 ** -0.5:.6g})"}


class ViewDraw(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(flow.zeros(4, 4))
        nn.init.normal_(self.weight.data[:2])  # into a view: the parameter's own record does not see it


class RandomAttribute(nn.Module):
    """A random tensor the forward reads, kept as a plain attribute: not re-drawn, so it must be refused."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.noise = flow.randn(4)


REACHED = "its initial values change with OneFlow's generator but come from no draw the recorder follows"


@pytest.mark.parametrize("module, message", [
    (Orthogonal, "rotation (parameter 'rotation' of the model: Orthogonal): orthogonal_"),
    (UnwatchedOp, "weight (parameter 'weight' of the model: UnwatchedOp): replaying normal(0, 1)"),
    (StrayDraw, f"weight (parameter 'weight' of the model: StrayDraw): {REACHED}"),
    (DerivedThroughNumpy, f"weight (parameter 'weight' of the model: DerivedThroughNumpy): {REACHED}"),
    (ViewDraw, f"weight (parameter 'weight' of the model: ViewDraw): {REACHED}"),
    (RandomAttribute, f"noise (attribute 'noise' of the model: RandomAttribute): {REACHED}"),
])
def test_what_cannot_be_reproduced_is_refused_by_name(module, message):
    with pytest.raises(RuntimeError, match="cannot reproduce") as error:
        build_with_seeded_init(module, 0)
    assert message in str(error.value)
    assert "fast" not in str(error.value), "the fix offered must keep the guarantee"


class ReplacedTables(nn.Module):
    """As LiBai main's ``RobertaEmbeddings``: builds a parent's tables, then replaces them with its own."""

    def __init__(self):
        super().__init__()
        self.table = nn.Embedding(10, 4)
        self.position = nn.Embedding(6, 4)
        self.table = nn.Embedding(12, 4)  # the first table's draw is discarded
        self.position = nn.Embedding(6, 4, padding_idx=0)


def test_a_draw_discarded_during_the_build_is_no_error():
    model, redrawn = build_with_seeded_init(ReplacedTables, 5)
    assert sorted(redrawn) == ["position.weight", "table.weight"]
    again, _ = build_with_seeded_init(ReplacedTables, 5)
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), again.state_dict()[name].numpy())
    # Without a rebuild to tell a discarded draw from one that reached the model, it is refused.
    with recording_init() as recorder:
        model = ReplacedTables()
    with pytest.raises(RuntimeError, match="a random draw that reached no parameter or buffer by a tracked path"):
        reinitialize(model, recorder, 5)


@pytest.mark.skipif(libai_line() is not libai_main, reason="RoBERTa is a LiBai main model")
def test_libai_roberta_discards_berts_tables_and_builds_under_the_default():
    """LiBai main's RobertaEmbeddings builds BERT's three tables, then its own: the discarded draws
    reached no parameter (refused where nothing can tell them from an untracked path), and a second
    build shows no kept tensor depends on them: accepted, every random tensor re-drawn."""
    from libai.models import RobertaModel

    def roberta():
        return RobertaModel(vocab_size=64, hidden_size=32, hidden_layers=2, num_attention_heads=4,
                            intermediate_size=64, max_position_embeddings=16, hidden_dropout_prob=0.0,
                            attention_probs_dropout_prob=0.0, bias_gelu_fusion=False, bias_dropout_fusion=False,
                            scale_mask_softmax_fusion=False)

    with recording_init() as recorder:
        model = roberta()
    with pytest.raises(RuntimeError, match="a random draw that reached no parameter or buffer by a tracked path"):
        reinitialize(model, recorder, 3)  # the check as it was: every discarded draw refused
    model, redrawn = build_with_seeded_init(roberta, 3)
    assert "embeddings.vocab_embeddings.weight" in redrawn and len(redrawn) == 12  # 3 tables, 4 x 2 layers, pooler
    again, _ = build_with_seeded_init(roberta, 3)
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), again.state_dict()[name].numpy(), err_msg=name)


def test_patches_are_removed_even_after_an_error():
    T = flow.Tensor
    watched = ((flow, "normal"), (flow._C, "uniform_"), (flow, "cat"), (T, "mul_"), (T, "__setitem__"),
               (T, "__mul__"), (T, "__getitem__"), (T, "clone"), (T, "detach"), (T, "T"),
               (flow.nn.Parameter, "__init__"))
    originals = [owner.__dict__[name] for owner, name in watched]
    with pytest.raises(ValueError):
        with recording_init():
            assert hasattr(T, "__deepcopy__")
            raise ValueError
    assert [owner.__dict__[name] for owner, name in watched] == originals
    assert "__deepcopy__" not in T.__dict__


# -- parameters that appear after the build -------------------------------------------------------

class Lazy(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        if not hasattr(self, "lazy_bias"):
            self.lazy_bias = nn.Parameter(flow.zeros(4))
        return self.fc(x) + self.lazy_bias


def test_a_parameter_created_in_forward_is_refused_by_name():
    model = watch_late_parameters(Lazy(), refuse=True)
    with pytest.raises(RuntimeError, match="lazy_bias") as error:
        model(flow.ones(2, 4))
    assert "never trained" in str(error.value) and "fc.weight" not in str(error.value)


def test_a_parameter_created_in_forward_is_warned_about_in_fast_mode(caplog):
    model = watch_late_parameters(Lazy(), refuse=False)
    with caplog.at_level(logging.WARNING, logger="libai_ext"):
        model(flow.ones(2, 4))
        model(flow.ones(2, 4))  # checked once
    warnings = [r.getMessage() for r in caplog.records if "after build_model" in r.getMessage()]
    assert len(warnings) == 1 and "lazy_bias" in warnings[0] and "never trained" in warnings[0]


def test_a_module_replaced_after_the_build_is_named_and_an_unchanged_model_passes(caplog):
    model = watch_late_parameters(Lazy(), refuse=True)
    model.lazy_bias = nn.Parameter(flow.zeros(4))  # present before the first forward, but after the watch
    model.fc = nn.Linear(4, 4)
    with pytest.raises(RuntimeError) as error:
        model(flow.ones(2, 4))
    assert "fc.weight, fc.bias" in str(error.value) and "lazy_bias" in str(error.value)
    quiet = watch_late_parameters(nn.Linear(4, 4), refuse=True)
    with caplog.at_level(logging.WARNING, logger="libai_ext"):
        quiet(flow.ones(2, 4))
    assert not caplog.records


# -- a project's own build_model (LiBai main's LLM projects) -------------------------------------------

@pytest.fixture
def project(tmp_path):
    """tests/rank_scripts/param_init.py's ``ProjectTrainer`` on LiBai's one-rank layout in this process, its
    pretrained file written; every patch and OneFlow's own random ops back afterwards."""
    import param_init as script  # tests/rank_scripts/param_init.py

    from libai_ext.compat import patching
    from libai_ext.random.layers import stochastic_ops

    with patching.restoring():
        script.use_layout("1", 4)
        script.ProjectTrainer.pretrained = str(tmp_path / "pretrained")
        script.write_pretrained(script.ProjectTrainer.pretrained)
        yield script
        stochastic_ops.unroute_stochastic_ops()


def test_a_build_model_override_not_calling_ours_gets_the_model_side_work(project, caplog):
    """As LiBai main's LLM projects (build_model overridden without super(), the model built and loaded by a
    loader, a LoRA adapter added): the loaded weights stay the file's bit for bit, only the adapter's random init
    is re-drawn from train.seed (whatever OneFlow's generator; its zeros stay), its dropout is converted and keyed
    by its name, and the log says so.  Before the wrapping, none of it happened."""
    built = []
    for generator_seed in (1, 2):
        flow.manual_seed(generator_seed)
        with caplog.at_level(logging.INFO, logger="libai_ext"):
            built.append(project.ProjectTrainer.build_model(project.project_config()))
    for model in built:
        tensors = model.state_dict()
        for name, value in project.loaded_values().items():
            assert np.array_equal(tensors[name].to_local().numpy(), value), name
        assert not tensors["head.lora_B.weight"].to_local().numpy().any()
        dropout = model.head.lora_dropout
        assert [type(dropout).__module__, getattr(dropout, "stream", None)] == PROJECT_DROPOUT
    first, second = (model.head.lora_A.weight.to_local().numpy() for model in built)
    assert np.array_equal(first, second) and first.std() > 0, "the adapter's init follows OneFlow's generator"
    assert caplog.text.count("layout_invariant init of the model ProjectTrainer.build_model built: 1 randomly "
                             "initialised tensors re-drawn") == 2 and "head.lora_dropout" in caplog.text
    assert "other tensors keep their constant init or the values loaded into them): head.lora_A.weight\n" \
        in caplog.text


def test_a_build_model_calling_ours_gets_the_work_once_and_keeps_what_it_loads(project, caplog):
    from libai_ext import ConsistentBatchTrainer

    class Finetune(ConsistentBatchTrainer):  # LiBai main's MAE: super().build_model, then its weights loaded
        @classmethod
        def build_model(cls, cfg):
            model = super().build_model(cfg)
            project.load_pretrained(model, project.ProjectTrainer.pretrained)
            return model

    with caplog.at_level(logging.INFO, logger="libai_ext"):
        model = Finetune.build_model(project.project_config())
    tensors = model.state_dict()
    assert all(np.array_equal(tensors[name].to_local().numpy(), value)
               for name, value in project.pretrained_values(model).items())
    assert caplog.text.count("layout_invariant init of the model") == 1
    assert "the model test_a_build_model_calling_ours_gets_the_work_once_and_keeps_what_it_loads.<locals>." \
           "Finetune.build_model built: 0 randomly" in caplog.text


def test_a_mixins_build_model_ahead_of_ours_gets_the_work_too(project):
    from libai_ext import ConsistentBatchTrainer

    class Adapting:  # a mixin ahead of ConsistentBatchTrainer in the bases
        @classmethod
        def build_model(cls, cfg):
            model = project.tiny_vit()
            model.head = project.Adapter(model.head)
            return model

    class Trainer(Adapting, ConsistentBatchTrainer):
        pass

    dropout = Trainer.build_model(project.project_config()).head.lora_dropout
    assert [type(dropout).__module__, getattr(dropout, "stream", None)] == PROJECT_DROPOUT


class Wrapped(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model


def test_a_model_replaced_after_build_model_is_refused_when_training_starts(project):
    from libai_ext.engine.model_work import check_trained

    cfg = project.project_config()
    built = project.ProjectTrainer.build_model(cfg)
    check_trained(built, "the built model", project.ProjectTrainer)
    trainer = object.__new__(project.ProjectTrainer)
    trainer._trainer = types.SimpleNamespace(model=Wrapped(built))
    with pytest.raises(RuntimeError, match=r"^ProjectTrainer\._trainer\.model \(Wrapped\) is not the model "
                                           r"ProjectTrainer\.build_model returned: .* Build the model you train "
                                           r"inside ProjectTrainer\.build_model"):
        trainer.train()
    with pytest.raises(RuntimeError, match=r"^the model handed to ProjectTrainer\.build_graph \(Wrapped\)"):
        project.ProjectTrainer.build_graph(cfg, Wrapped(built))


# -- multi-rank -------------------------------------------------------------------------------------

FOUR_RANK_LAYOUTS = {4: ("tp2xpp2", "dp2xtp2")}
LONG_LAYOUTS = {2: ("tp2", "pp2", "dp2")}
SWIN_BUILDS = ("layout_invariant", "fast", "stock")
# LiBai main's RoBERTa builds BERT's embedding tables, then replaces them: draws discarded during the build.
LIBAI_MODELS = ("gpt", "bert", "vit", "t5") + (("roberta",) if libai_line() is libai_main else ())
PROJECT_DROPOUT = ["libai_ext.random.layers.stochastic", "head.lora_dropout"]  # converted, keyed by its name


@functools.lru_cache(maxsize=None)
def weights(nproc, layouts):
    """{(layout, model, build): {name: [sha1, std]}} over every rank of one launch going through
    ``layouts``; replicas of a tensor must agree.  Plus the raw records by (layout, model, build)."""
    extra = ["--late"] if nproc == 1 else []
    pretrained = os.path.join(tempfile.mkdtemp(), "pretrained")
    result = launch(rank_script("param_init.py"), nproc, timeout=600,
                    args=["--layouts", ",".join(layouts), "--pretrained", pretrained, *extra])
    per_layout = len(SWIN_BUILDS) + len(LIBAI_MODELS) + 2 + (2 if extra else 0)
    merged, records = {}, {}
    for rank, rank_records in records_of_every_rank(result, count=per_layout * len(layouts)).items():
        assert [r["layout"] for r in rank_records] == [layout for layout in layouts for _ in range(per_layout)]
        for record in rank_records:
            key = (record["layout"], record["model"], record["build"])
            records.setdefault(key, {})[rank] = record
            for name, value in record.get("weights", {}).items():
                seen = merged.setdefault(key, {}).setdefault(name, value)
                assert seen[0] == value[0], f"{key} rank {rank}: replicas of {name} differ"
    return merged, records


def reference():
    return weights(1, ("1",))


def check_layout(nproc, layouts, layout):
    single, single_records = reference()
    parallel, records = weights(nproc, layouts)
    # configs/demo_swin_digits_cpu.py through the trainers: the plugin matches 1 rank bit for bit ...
    one = {build: single["1", "swin", build] for build in SWIN_BUILDS}
    assert sorted(one["layout_invariant"]) == sorted(one["fast"]) == sorted(one["stock"])
    random = [name for name, (_, std) in one["layout_invariant"].items() if std > 0 and "mask" not in name
              and "index" not in name]
    assert len(random) == 5 * 4 + 4  # qkv/proj/fc1/fc2/bias table x 4 blocks; reduction, head, conv weight+bias
    differ = {}
    for build in SWIN_BUILDS:
        layout_weights = parallel[layout, "swin", build]
        assert sorted(layout_weights) == sorted(one[build]), build
        differ[build] = sorted(n for n in one[build] if layout_weights[n][0] != one[build][n][0])
    assert differ["layout_invariant"] == []
    # ... while without the re-draw every tensor-parallel split differs (all random ones but the replicated conv).
    if "tp" in layout:
        split = sorted(n for n in random if not n.startswith("patch_embed."))
        assert differ["fast"] == split and differ["stock"] == split
    # LiBai's own models, built with seeded init: bit for bit.
    for model in LIBAI_MODELS:
        assert parallel[layout, model, "layout_invariant"] == single["1", model, "layout_invariant"], model
        assert len(single["1", model, "layout_invariant"]) > 20, model
    # The EMA teacher and the load_state_dict copy equal the student on every rank, and 1 rank.
    ema = records[layout, "ema", "layout_invariant"]
    assert all(r["differ_from_student"] == {"teacher": [], "loaded": []} and r["compared"] > 0
               for r in ema.values()), ema
    derived = [r["derived_exact"] for r in ema.values() if r["derived_exact"] is not None]
    assert derived and all(d == {"halved": True, "joined": True} for d in derived), ema
    assert parallel[layout, "ema", "layout_invariant"] == single["1", "ema", "layout_invariant"]
    # A project's own build_model: the loaded weights are the file's, the adapter's init and dropout keyed.
    assert parallel[layout, "project", "layout_invariant"] == single["1", "project", "layout_invariant"]
    assert all(r["differ_from_file"] == [] and r["dropout"] == PROJECT_DROPOUT
               for r in records[layout, "project", "layout_invariant"].values())


def test_one_rank_reference_copies_follow_and_late_parameters_are_named():
    single, records = reference()
    ema = records["1", "ema", "layout_invariant"][0]
    assert ema["differ_from_student"] == {"teacher": [], "loaded": []} and ema["compared"] == 32
    assert ema["derived_exact"] == {"halved": True, "joined": True}
    random = sorted(n[len("student."):] for n, (_, std) in single["1", "ema", "layout_invariant"].items()
                    if n.startswith("student.") and std > 0)
    assert len(random) == 13  # ViT: 4 weights x 2 blocks, cls token, pos embed, patch conv weight+bias, head
    assert ema["followers"] == sorted(["halved", "joined"] + [f"{copy}.{n}" for copy in ("loaded", "teacher")
                                                              for n in random])
    project = records["1", "project", "layout_invariant"][0]
    assert project["differ_from_file"] == [] and project["dropout"] == PROJECT_DROPOUT
    refused = records["1", "late", "layout_invariant"][0]
    assert "lazy_scale" in refused["raised"] and "never trained" in refused["raised"]
    warned = records["1", "late", "fast"][0]
    assert warned["raised"] is None and len(warned["warnings"]) == 1 and "lazy_scale" in warned["warnings"][0]


# The quick tier: LiBai's TransformerLayer trained from the seed on tp2 and dp2 x pp2 in
# tests/test_random_op_layouts.py (its losses equal 1 rank's only if its initial weights do).
@pytest.mark.long
@pytest.mark.parametrize("layout", FOUR_RANK_LAYOUTS[4])
def test_initial_weights_from_the_seed_are_the_same_on_every_layout(layout):
    check_layout(4, FOUR_RANK_LAYOUTS[4], layout)


@pytest.mark.long
@pytest.mark.parametrize("layout", LONG_LAYOUTS[2])
def test_initial_weights_on_two_rank_layouts(layout):
    check_layout(2, LONG_LAYOUTS[2], layout)


def test_the_second_build_is_bounded():
    """Above ``rebuild_limit`` bytes of parameters and buffers on a rank the model is not built again: the discarded
    draws are refused by name, saying which limit (train.init_rebuild_limit_gib) and how much the rank holds."""
    builds = []

    def build():
        builds.append(1)
        return ReplacedTables()
    held = (12 + 6) * 4 * 4  # the kept tables, float32
    model, redrawn = build_with_seeded_init(build, 5, rebuild_limit=held)
    assert len(builds) == 2 and sorted(redrawn) == ["position.weight", "table.weight"]
    builds.clear()
    with pytest.raises(RuntimeError, match=r"test_param_init.py:\d+ \(__init__\).*train.init_rebuild_limit_gib=.* GiB "
                                           r"of parameters and buffers \(this rank 0.00 GiB\)"):
        build_with_seeded_init(build, 5, rebuild_limit=held - 1)
    assert len(builds) == 1  # refused before a second build
