"""Initial weights from the seed alone (train.randomness="layout_invariant", libai_ext.random.param_init).

In-process (local tensors): the recorded recipes reproduce what the model's code asked for
(distributions, fans, constants, tied weights), the values depend on the seed and names only,
and what cannot be reproduced is refused by name.  Multi-rank: configs/swin_digits_cpu.py's model
built as ConsistentBatchTrainer builds it has bit-identical initial weights on 1 rank and on
tp2 x pp2 (4 ranks), while the same builds without the re-draw (train.randomness="fast", and stock
LiBai's DefaultTrainer) differ there.  tp2, pp2 and dp2 too with LIBAI_EXT_ALL_LAYOUTS=1 (each
launch costs 15-30 s on 2 shared cores; tp2 x pp2 covers both splits), and then LiBai's own GPT,
BERT, ViT and T5 (tiny) on 1 rank and tp2 x pp2 as well.
"""
import os
import functools
import math

import numpy as np
import oneflow as flow
import pytest
from flowvision.layers import trunc_normal_
from oneflow import nn

from conftest import rank_script, records_of_every_rank
from libai_ext.random import build_with_seeded_init, recording_init
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


def seeded(seed, reverse=False, generator_seed=0, big=False):
    flow.manual_seed(generator_seed)
    model, redrawn = build_with_seeded_init(lambda: Tiny(reverse, big), seed)
    # copies: numpy() may share the memory of a tensor that is freed with the model
    return {name: p.numpy().copy() for name, p in model.state_dict().items()}, redrawn


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
        self.weight = nn.Parameter(flow.randn(4, 4) * 2.0)  # an out-of-place op: the draw's path is lost


@pytest.mark.parametrize("module, message", [
    (Orthogonal, "rotation: orthogonal_"),
    (UnwatchedOp, "weight: replaying normal(0, 1)"),
    (StrayDraw, "a random draw that reached no parameter or buffer"),
])
def test_what_cannot_be_reproduced_is_refused_by_name(module, message):
    with pytest.raises(RuntimeError, match="cannot reproduce") as error:
        build_with_seeded_init(module, 0)
    assert message in str(error.value)


def test_patches_are_removed_even_after_an_error():
    originals = (flow.normal, flow._C.uniform_, flow.Tensor.mul_, flow.Tensor.__setitem__, flow.nn.Parameter.__init__)
    with pytest.raises(ValueError):
        with recording_init():
            raise ValueError
    assert (flow.normal, flow._C.uniform_, flow.Tensor.mul_, flow.Tensor.__setitem__,
            flow.nn.Parameter.__init__) == originals


BUILDS = ("layout_invariant", "fast", "stock")  # the rank script's builds, in order
LAYOUTS = {"1": (1, 1, 1), "tp2xpp2": (1, 2, 2), "tp2": (1, 2, 1), "pp2": (1, 1, 2), "dp2": (2, 1, 1)}
EXTRA_LAYOUTS = ("tp2", "pp2", "dp2")
STOCK_DIFFERS = ("tp2xpp2", "tp2")  # OneFlow's split draws; pp and dp replicate the 1-rank draws


@functools.lru_cache(maxsize=None)
def weights(layout):
    """{build: {name: [sha1, mean, std]}} over every rank; replicas of a tensor must agree."""
    dp, tp, pp = LAYOUTS[layout]
    result = launch(rank_script("param_init.py"), dp * tp * pp, timeout=300,
                    args=["--dp", dp, "--tp", tp, "--pp", pp, "--layers", 4])
    merged = {build: {} for build in BUILDS}
    for rank, records in records_of_every_rank(result, count=len(BUILDS)).items():
        assert [r["build"] for r in records] == list(BUILDS), rank
        for record in records:
            for name, value in record["weights"].items():
                seen = merged[record["build"]].setdefault(name, value)
                assert seen[0] == value[0], f"{layout} rank {rank}: replicas of {name} differ"
    return merged


ALL_LAYOUTS = pytest.mark.skipif(os.environ.get("LIBAI_EXT_ALL_LAYOUTS") != "1", reason="LIBAI_EXT_ALL_LAYOUTS=1")


@pytest.mark.parametrize("layout", ["tp2xpp2"] + [pytest.param(name, marks=ALL_LAYOUTS) for name in EXTRA_LAYOUTS])
def test_swin_initial_weights_from_the_seed_are_the_same_on_every_layout(layout):
    single, parallel = weights("1"), weights(layout)
    reference = single["layout_invariant"]
    assert len(reference) == 71 and sorted(parallel["layout_invariant"]) == sorted(reference)
    random = [name for name, (_, _, std) in reference.items() if std > 0 and "mask" not in name
              and "index" not in name]
    assert len(random) == 5 * 4 + 4  # qkv/proj/fc1/fc2/bias table x 4 blocks; reduction, head, conv weight+bias
    differ = {build: sorted(n for n in reference if parallel[build][n][0] != single[build][n][0]) for build in BUILDS}
    assert differ["layout_invariant"] == []
    if layout in STOCK_DIFFERS:
        # Without the re-draw every split tensor differs (all random ones but the replicated conv).
        split = sorted(n for n in random if not n.startswith("patch_embed."))
        assert differ["fast"] == split and differ["stock"] == split


def libai_model_weights(nproc, *layout):
    """{model: {name: sha1}} over every rank of a launch of rank_scripts/libai_models_init.py."""
    result = launch(rank_script("libai_models_init.py"), nproc, timeout=400, args=list(layout) + ["--layers", 4])
    merged = {}
    for rank, records in records_of_every_rank(result, count=4).items():
        for record in records:
            for name, digest in record["weights"].items():
                seen = merged.setdefault(record["model"], {}).setdefault(name, digest)
                assert seen == digest, f"rank {rank}: replicas of {record['model']} {name} differ"
    return merged


@ALL_LAYOUTS
def test_libai_models_initial_weights_are_the_same_on_tp2xpp2():
    single, parallel = libai_model_weights(1), libai_model_weights(4, "--tp", 2, "--pp", 2)
    assert sorted(single) == ["bert", "gpt", "t5", "vit"]
    for model, reference in single.items():
        assert parallel[model] == reference, model
