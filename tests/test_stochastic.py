"""Dropout / DropPath masks: equal on replicas, independent across shards, on any placement.

Both modes (``train.randomness``): "layout_invariant" also draws the same global mask on
1, 2 and 8 ranks; "fast" (OneFlow's native kernel, seeded per shard) only on the same layout.
Stock OneFlow dropout (what LiBai uses) breaks one rule or the other depending on seeding,
and LiBai's DropPath cannot take tensor-parallel-split inputs.
"""
import itertools
import os

import numpy as np
import oneflow as flow
import pytest

from conftest import assert_refused_without_hang, rank_script, records_of_every_rank
from libai_ext.testing import launch

LAYOUTS = {  # name: (nproc, args)
    "1rank": (1, ["--sbps", "S0,B"]),
    "dp2": (2, ["--dp", 2, "--sbps", "S0,B"]),
    "dp2-tp2": (4, ["--dp", 2, "--tp", 2]),
    "dp2-tp2-pp2-last-stage": (8, ["--dp", 2, "--tp", 2, "--pp", 2, "--layer-idx", -1]),
}
MODES = ("layout_invariant", "fast")
MULTI = ["dp2-tp2", "dp2-tp2-pp2-last-stage"]
EIGHT = "dp2-tp2-pp2-last-stage"  # the long tier's layout (8 ranks); the quick tier reads the others


def layout_param(layout):
    return pytest.param(layout, marks=pytest.mark.long) if layout == EIGHT else layout
LIBAI_SBPS = ("S0,B", "B,S1", "S0,S1")
USER_SBPS = ("1d:S0", "1d:S1", "1d:B", "2d:S0,B", "2d:B,S1", "2d:S0,S1", "2d:S1,S0")
PARTIAL_SBPS = ("1d:P", "2d:S0,P", "2d:P,S1")
SHAPE_ELEMENTS, SHAPE_ROWS = 64 * 12, 64


class Runs(dict):
    """Each layout's run, launched when a test first reads it (the quick tier never starts 8 ranks)."""

    def __missing__(self, name):
        nproc, args = LAYOUTS[name]
        result = self[name] = launch(rank_script("stochastic.py"), nproc, args, timeout=600)
        records_of_every_rank(result)  # a silent rank fails here, before any case is read
        return result


@pytest.fixture(scope="module")
def runs():
    return Runs()


def records(result, where, sbp, kind, impl):
    """{rank: record} of every rank that reported this case (all ranks must)."""
    if not hasattr(result, "by_case"):  # read each rank's records once, not once per case
        result.by_case = {}
        for rank in range(result.nproc):
            for rec in result.records(rank):
                result.by_case.setdefault((rec["where"], rec["sbp"], rec["kind"], rec["impl"]), {})[rank] = rec
    out = result.by_case.get((where, sbp, kind, impl), {})
    assert len(out) == result.nproc, f"{where} {sbp} {kind} {impl}: ranks {sorted(out)} reported"
    return out


def masks(result, where, sbp, kind, impl):
    """{rank: {position: kept}} for the ranks that hold part of the tensor."""
    return {rank: dict(rec["mask"]) for rank, rec in records(result, where, sbp, kind, impl).items()
            if rec["mask"]}


def replicas_agree(per_rank):
    seen = {}
    for mask in per_rank.values():
        for position, keep in mask.items():
            if seen.setdefault(position, keep) != keep:
                return False
    return True


def shard_patterns(per_rank):
    """Keep patterns (in position order) of ranks holding disjoint shards, pairwise."""
    pairs = []
    for a, b in itertools.combinations(per_rank, 2):
        if not set(per_rank[a]) & set(per_rank[b]) and len(per_rank[a]) == len(per_rank[b]):
            pairs.append(([per_rank[a][p] for p in sorted(per_rank[a])],
                          [per_rank[b][p] for p in sorted(per_rank[b])]))
    return pairs


def union(per_rank):
    merged = {}
    for mask in per_rank.values():
        merged.update(mask)
    return merged


def assert_sbp_correct(per_rank, holders, kind):
    assert len(per_rank) == holders, f"{len(per_rank)} ranks hold data, expected {holders}"
    assert replicas_agree(per_rank), "replicas drew different masks"
    pairs = shard_patterns(per_rank)
    equal = sum(a == b for a, b in pairs)
    if kind == "dropout":  # 96 elements a shard: equal patterns mean one stream
        assert equal == 0, f"{equal} of {len(pairs)} shard pairs drew the same mask"
    else:  # 8 samples a shard on 8 ranks: a pair agrees by chance 1 time in 256, every pair only by one stream
        assert not pairs or equal < len(pairs), f"all {len(pairs)} shard pairs drew the same mask"
    kept = list(union(per_rank).values())
    assert len(kept) == (SHAPE_ELEMENTS if kind == "dropout" else SHAPE_ROWS)
    assert abs(sum(kept) - len(kept) / 2) < 4 * np.sqrt(len(kept)) / 2, "keep rate more than 4 sigma off 1/2"
    return pairs


CASES = [pytest.param(layout, sbp, kind, mode, marks=[pytest.mark.long] if layout == EIGHT else [])
         for layout in MULTI for sbp in LIBAI_SBPS for kind in ("dropout", "droppath") for mode in MODES]


@pytest.mark.parametrize("layout, sbp, kind, mode", CASES)
def test_replicas_equal_shards_independent(runs, layout, sbp, kind, mode):
    per_rank = masks(runs[layout], "libai", sbp, kind, mode)
    pairs = assert_sbp_correct(per_rank, 4, kind)  # the 4 ranks of the layer's stage
    if kind == "dropout" or sbp.startswith("S0"):  # DropPath's mask splits with the batch only
        assert pairs, "no two ranks hold disjoint shards"


USER_CASES = [pytest.param(layout, sbp, kind, mode, marks=[pytest.mark.long] if layout == EIGHT else [])
              for layout in ["dp2"] + MULTI for sbp in USER_SBPS for kind in ("dropout", "droppath") for mode in MODES]


@pytest.mark.parametrize("layout, sbp, kind, mode", USER_CASES)
def test_placements_the_user_built(runs, layout, sbp, kind, mode):
    """All ranks in 1D while LiBai's placement is 2D (or a stage), a 2D hierarchy of the user's."""
    result = runs[layout]
    assert_sbp_correct(masks(result, "user", sbp, kind, mode), result.nproc, kind)


@pytest.mark.parametrize("layout", [layout_param(layout) for layout in MULTI])
@pytest.mark.parametrize("sbp", ["1d:S0", "2d:S0,B", "2d:S0,S1"])
def test_stock_dropout_breaks_user_placements_too(runs, layout, sbp):
    # Per-rank seeds: replicas disagree (when there are any); identical seeds: shards repeat.
    rank_seeded = masks(runs[layout], "user", sbp, "dropout", "stock_rank_seed")
    same_seed = shard_patterns(masks(runs[layout], "user", sbp, "dropout", "stock_same_seed"))
    assert not replicas_agree(rank_seeded) or (same_seed and all(a == b for a, b in same_seed))


@pytest.mark.parametrize("layout", [layout_param(layout) for layout in ["dp2"] + MULTI])
@pytest.mark.parametrize("sbp", PARTIAL_SBPS)
@pytest.mark.parametrize("kind", ["dropout", "droppath"])
@pytest.mark.parametrize("mode", MODES)
def test_partial_sums_masked_alike_without_reduction(runs, layout, sbp, kind, mode):
    """P in, P out (no all-reduce); summed, every element is 0 or x / (1 - p)."""
    recs = records(runs[layout], "user", sbp, kind, mode)
    for rank, rec in recs.items():
        assert "partial_sum" in rec["out_sbp"], f"rank {rank}: output sbp {rec['out_sbp']}"
        assert rec["mixed"] == 0, f"rank {rank}: {rec['mixed']} elements mixed two masks"
    assert_sbp_correct({rank: dict(rec["mask"]) for rank, rec in recs.items()}, runs[layout].nproc, kind)


@pytest.mark.parametrize("kind", ["dropout", "droppath"])
@pytest.mark.parametrize("mode", MODES)
def test_local_tensors_every_rank_alike(runs, kind, mode):
    """A local tensor is its own whole tensor: the same mask on every rank."""
    per_rank = masks(runs["dp2-tp2"], "local", "local", kind, mode)
    assert len(per_rank) == 4 and replicas_agree(per_rank)


@pytest.mark.parametrize("layout", [layout_param(layout) for layout in MULTI])
def test_stock_dropout_breaks_replicas_or_shards(runs, layout):
    # Per-rank seeds: replicas of the same rows draw different masks.
    assert not replicas_agree(masks(runs[layout], "libai", "S0,B", "dropout", "stock_rank_seed"))
    # Identical seeds: every shard draws the same pattern.
    pairs = shard_patterns(masks(runs[layout], "libai", "S0,S1", "dropout", "stock_same_seed"))
    assert pairs and all(a == b for a, b in pairs)


def test_stock_droppath_fails_on_tensor_parallel_inputs(runs):
    failures = [rec for rec in records(runs["dp2-tp2"], "libai", "B,S1", "droppath", "stock_same_seed").values()]
    assert len(failures) == 4
    for rec in failures:
        assert rec["error"] and "split axis" in rec["error"]


def reference(runs, kind):
    ref = union(masks(runs["1rank"], "libai", "S0,B", kind, "layout_invariant"))
    assert len(ref) == (SHAPE_ELEMENTS if kind == "dropout" else SHAPE_ROWS)
    return ref


@pytest.mark.parametrize("layouts", [pytest.param([layout for layout in LAYOUTS if layout != EIGHT], id="1-4"),
                                     pytest.param(list(LAYOUTS), id="1-8", marks=pytest.mark.long)])
@pytest.mark.parametrize("kind", ["dropout", "droppath"])
def test_layout_invariant_mode_draws_one_global_mask_everywhere(runs, kind, layouts):
    ref = reference(runs, kind)
    checked = 0
    for layout in layouts:
        for where, sbps in (("libai", LIBAI_SBPS), ("user", USER_SBPS + PARTIAL_SBPS), ("local", ("local",))):
            for sbp in sbps:
                if layout in ("1rank", "dp2") and where == "libai" and sbp != "S0,B":
                    continue
                if layout == "1rank" and where == "user":
                    continue
                per_rank = masks(runs[layout], where, sbp, kind, "layout_invariant")
                assert union(per_rank) == ref, f"{layout} {where} {sbp} drew another global mask"
                checked += 1
    # 1rank: libai + local; dp2: libai + 10 user + local; 4 and 8 ranks: 3 libai + 10 user + local each
    assert checked == 2 + 12 + 14 * (len(layouts) - 2)


@pytest.mark.parametrize("layout", [layout_param(layout) for layout in ["dp2"] + MULTI])
def test_graph_path_draws_the_eager_mask(runs, layout):
    """Under nn.Graph the layout_invariant mask comes from global ops only: the same mask."""
    checked = 0
    for where, sbps in (("libai", LIBAI_SBPS), ("user", USER_SBPS)):
        for sbp in sbps:
            if layout == "dp2" and where == "libai" and sbp != "S0,B":
                continue
            recs = records(runs[layout], where, sbp, "dropout", "global_path")
            holders = [rec["agrees"] for rec in recs.values() if rec["agrees"] is not None]
            assert holders and all(holders), f"{where} {sbp}: {holders}"
            checked += 1
    assert checked == (8 if layout == "dp2" else 10)


def test_fast_mode_depends_on_layout_like_stock(runs):
    one = union(masks(runs["1rank"], "libai", "S0,B", "dropout", "fast"))
    four = union(masks(runs["dp2-tp2"], "libai", "S0,B", "dropout", "fast"))
    assert len(one) == len(four) == SHAPE_ELEMENTS and one != four


def test_stock_dropout_depends_on_layout(runs):
    one = union(masks(runs["1rank"], "libai", "S0,B", "dropout", "stock_same_seed"))
    four = union(masks(runs["dp2-tp2"], "libai", "S0,B", "dropout", "stock_same_seed"))
    assert one != four


# ---- one process: statistics, gradients, counters -------------------------------------------

def _mask(shape, rate, seed, stream, call):
    """A layer's mask: keys from (seed, stream name, call) as Dropout derives them."""
    from libai_ext.random.counter_rng import keep_mask, stream_keys
    return keep_mask(shape, rate, stream_keys(seed, stream, call)).numpy()


def _z_correlation(a, b):
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return np.corrcoef(a, b)[0, 1] * np.sqrt(a.size)


@pytest.mark.parametrize("rate", [0.1, 0.5])
@pytest.mark.parametrize("shape", [(1000, 1000), (8, 197, 768), (64, 4, 64, 64)])
def test_layout_invariant_mask_statistics(shape, rate):
    """Drop rate within 4 sigma over >= 10^6 elements; no correlation (|z| < 4.5) between
    neighbouring elements, rows, planes, steps or layers."""
    mask = _mask(shape, rate, 1234, "probe", 0)
    assert mask.size >= 10 ** 6
    rows = mask.reshape(-1, shape[-1])
    rate_z = (1 - mask.mean() - rate) / np.sqrt(rate * (1 - rate) / mask.size)
    assert abs(rate_z) < 4, f"drop rate {1 - mask.mean():.5f} is {rate_z:.1f} sigma from {rate}"
    pairs = {
        "elements": (rows[:, 1:], rows[:, :-1]),
        "rows": (rows[1:], rows[:-1]),
        "rectangles": (rows[1:, 1:] ^ rows[:-1, 1:], rows[1:, :-1] ^ rows[:-1, :-1]),
        "steps": (mask, _mask(shape, rate, 1234, "probe", 1)),
        "layers": (mask, _mask(shape, rate, 1234, "other", 0)),
        "seeds": (mask, _mask(shape, rate, 1235, "probe", 0)),
    }
    if len(shape) > 2:  # neighbouring planes (e.g. attention heads)
        flat, plane = mask.ravel(), shape[-1] * shape[-2]
        pairs["planes"] = (flat[plane:], flat[:-plane])
    assert len(pairs) == (7 if len(shape) > 2 else 6)
    for name, (a, b) in pairs.items():
        z = _z_correlation(a, b)
        assert abs(z) < 4.5, f"{name}: correlation z = {z:.1f}"


def test_host_keys_equal_the_keys_hashed_from_a_step_tensor():
    """Eager layers derive a draw's keys on the host, graphs from the step key's int32 tensors: the same keys,
    for steps whose key words are negative as int32 too."""
    import oneflow as flow

    from libai_ext.random.counter_rng import call_keys, step_key, stream_keys, stream_words

    steps = [0, 1, 2, 3, 1000, 123457, 2 ** 24 + 1, 2 ** 31 - 1]
    checked = 0
    for stream in ("layers.0.drop", "head.drop_path"):
        for step in steps:
            hashed = tuple(flow.tensor([word], dtype=flow.int32) for word in step_key(1234, step))
            for call in (0, 5):
                tensor_keys = tuple(int(k.item()) if isinstance(k, flow.Tensor) else k
                                    for k in call_keys(stream_words(1234, stream), hashed, call))
                assert stream_keys(1234, stream, step, call) == tensor_keys, (stream, step)
                checked += 1
    assert checked == 32


@pytest.mark.parametrize("shape", [(64, 12), (4, 5, 6, 7)])
def test_a_shards_bits_from_local_ops_equal_the_global_tensors(shape):
    """Eager ranks hash their slice with local ops; the bits must be those of the whole tensor
    (slices cut anywhere, one element wide included)."""
    from libai_ext.random.counter_rng import counter_bits, derive_keys, local_counter_bits

    keys = derive_keys(1234, "probe", 3)
    whole = counter_bits(shape, keys).numpy()
    boxes = [((0, shape[0]), (0, shape[1])), ((1, 3), (3, 4)), ((2, 3), (1, 5)), ((0, shape[0]), (4, 5))]
    assert len(boxes) == 4
    for (lo0, hi0), (lo1, hi1) in boxes:
        lo, hi = [lo0, lo1] + [0] * (len(shape) - 2), [hi0, hi1] + list(shape[2:])
        if len(shape) > 2:
            lo[-1], hi[-1] = 2, 3
        part = local_counter_bits(shape, lo, hi, keys).numpy()
        np.testing.assert_array_equal(part, whole[tuple(slice(a, b) for a, b in zip(lo, hi))])


def _one_rank_global(x):
    return x.to_global(placement=flow.placement("cpu", ranks=[0]), sbp=flow.sbp.broadcast)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("as_global", [False, True])
def test_gradient_is_the_mask_scaled(mode, as_global):
    from libai_ext.random.layers import Dropout

    x = flow.ones(16, 32)
    x = (_one_rank_global(x) if as_global else x).requires_grad_()
    y = Dropout(0.25, randomness=mode).train()(x)
    y.sum().backward()
    y, grad = y.numpy(), x.grad.numpy()
    np.testing.assert_allclose(np.unique(y), [0.0, 1 / 0.75], rtol=1e-6)
    np.testing.assert_allclose(grad, y)


# ---- what a call computes: OneFlow's kernel, bit for bit ------------------------------------------

def _native_dropout(x, p):
    from libai_ext.random.layers import stochastic

    generator = flow.Generator()
    generator.manual_seed(11)
    return stochastic._native_dropout(x, p, True, False, generator)  # OneFlow's own, never routed


def _special_values(shape):
    """Normal values, with signed zeros and infinities among them (dropped: x * 0 keeps the sign, NaN)."""
    values = np.random.default_rng(5).standard_normal(shape).astype(np.float32) * 100
    flat = values.reshape(-1)
    flat[::97], flat[1::97], flat[2::97], flat[3::97] = np.inf, -np.inf, -0.0, 0.0
    return values


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_outputs_equal_oneflows_dropout_kernel_bit_for_bit(dtype):
    """Wherever OneFlow's CPU kernel and the layer decide alike, the same bits: kept, ``x`` times
    ``1.0f / (1.0f - p)`` computed in float32; dropped, ``x * 0`` (a signed zero, NaN for an
    infinity).  The layer's previous scale, ``1 / (1 - p)`` rounded from double, is seen to differ
    from the kernel's at some of these rates."""
    from libai_ext.random.layers import Dropout

    x = flow.tensor(_special_values((128, 96))).to(getattr(flow, dtype))
    values = x.numpy()
    infinite = np.isinf(values)
    counts = {"kept": 0, "dropped": 0, "infinities dropped": 0}
    old_rule_differs = 0
    for p in (0.1, 0.3, 0.45, 0.7, 0.9):
        ours = Dropout(p, randomness="layout_invariant").train()(x).numpy()
        theirs = _native_dropout(x, p).numpy()
        decided = [np.where(infinite, ~np.isnan(out), out != 0) for out in (ours, theirs)]
        agree = decided[0] == decided[1]
        assert ours[agree].tobytes() == theirs[agree].tobytes(), f"p={p}"
        counts["kept"] += int((agree & decided[0]).sum())
        counts["dropped"] += int((agree & ~decided[0] & (values != 0)).sum())
        counts["infinities dropped"] += int((agree & ~decided[0] & infinite).sum())
        kept = agree & decided[0] & np.isfinite(values)
        old = values[kept] * np.asarray(np.float32(1 / (1 - p)), dtype=values.dtype)
        old_rule_differs += int(old.tobytes() != theirs[kept].tobytes())
    assert min(counts.values()) > 20, counts
    assert old_rule_differs > 0, "the previous scale matched the kernel at every rate: the test cannot fail"


def test_float16_kept_values_are_the_cuda_kernels():
    """OneFlow 0.9.0 has no CPU dropout kernel for float16 (refused here); its CUDA kernel multiplies
    in float16 by the float32 scale rounded to float16: kept = round(x * round(1.0f / (1.0f - p))),
    which the layer computes on every device (``make gpu-check`` compares with the kernel on a GPU)."""
    from libai_ext.random.layers import Dropout

    with pytest.raises(Exception, match="Cannot find the kernel"):
        _native_dropout(flow.ones(4, dtype=flow.float16), 0.1).numpy()
    values = np.random.default_rng(6).standard_normal((32, 64)).astype(np.float16)
    x = flow.tensor(values)
    checked = 0
    for p in (0.1, 0.3, 0.7):
        scale = np.float16(np.float32(1.0) / (np.float32(1.0) - np.float32(p)))
        ours = Dropout(p, randomness="layout_invariant").train()(x).numpy()
        kept = ours != 0
        assert 0 < kept.sum() < kept.size
        assert ours[kept].tobytes() == (values * scale)[kept].tobytes()  # numpy rounds float16 products once
        float32_then_cast = (values.astype(np.float32) * np.float32(1.0 / (1 - p))).astype(np.float16)
        checked += int(float32_then_cast[kept].tobytes() != ours[kept].tobytes())
    assert checked > 0, "scaling in float32 then casting gave the same values: the test cannot tell the rules apart"


def test_bfloat16_has_no_cpu_kernels_in_oneflow():
    """Where OneFlow 0.9.0 lacks the CPU kernels (bfloat16: no dropout, not even a product), the layer
    cannot run on CPU either; ``make gpu-check`` compares its kept values with the CUDA kernel's."""
    x = flow.ones(4).to(flow.bfloat16)
    for what in (lambda: _native_dropout(x, 0.1), lambda: x * x):
        with pytest.raises(Exception, match="Cannot find the kernel"):
            what().numpy()


@pytest.mark.parametrize("mode", MODES)
def test_rate_one_drops_everything_as_stock_and_rate_zero_returns_the_input(mode):
    """p = 1 (Dropout, a converted ``nn.Dropout(1.0)``, LiBai's ``DropPath(1.0)`` converted) gives
    ``x * 0`` like OneFlow's dropout and LiBai main's DropPath (0.1.1's divides by 0: NaN), zero
    gradients; p = 0 returns the input itself."""
    import libai.layers

    from libai_ext.random.layers import DropPath, Dropout, convert_stochastic_layers

    x = _one_rank_global(flow.tensor(_special_values((8, 16))))  # LiBai's DropPath reads x.sbp
    expected = (x * 0).numpy()
    np.testing.assert_array_equal(_native_dropout(x, 1.0).numpy(), expected)  # OneFlow's kernel: x * 0 too
    model = flow.nn.Sequential(flow.nn.Dropout(1.0), libai.layers.DropPath(1.0))
    stock = model.train()(x).numpy()
    convert_stochastic_layers(model)
    assert [type(m).__name__ for m in model] == ["Dropout", "DropPath"]
    for layer in (Dropout(1.0, randomness=mode), DropPath(1.0, randomness=mode), model):
        xg = _one_rank_global(flow.tensor(x.numpy())).requires_grad_()
        y = layer.train()(xg)
        y.sum().backward()
        assert y.numpy().tobytes() == expected.tobytes(), type(layer).__name__
        assert not np.any(xg.grad.numpy()), type(layer).__name__
    assert stock.tobytes() == expected.tobytes() or np.isnan(stock).all()  # main: x * 0; 0.1.1: NaN
    for layer in (Dropout(0.0, randomness=mode), DropPath(0.0, randomness=mode)):
        assert layer.train()(x) is x


def test_drop_path_kept_values_are_libais():
    """Kept samples are ``x * (1 / keep_prob)`` with the quotient in float32, as LiBai main's DropPath
    (0.1.1's ``x.div(keep_prob)`` rounds the quotient per element: within one unit in the last place)."""
    import libai.layers

    from libai_ext.random.layers import DropPath

    values = np.random.default_rng(7).standard_normal((64, 3, 5)).astype(np.float32)
    x = _one_rank_global(flow.tensor(values))
    checked = 0
    for p in (0.1, 0.3, 0.7):
        expected = values * (np.float32(1.0) / np.float32(1.0 - p))
        ours = DropPath(p, randomness="layout_invariant").train()(x).numpy()
        kept = ours.reshape(64, -1).any(axis=1)
        assert 0 < kept.sum() < 64
        assert ours[kept].tobytes() == expected[kept].tobytes()
        flow.manual_seed(3)
        stock = libai.layers.DropPath(p).train()(x).numpy()
        both = kept & stock.reshape(64, -1).any(axis=1)
        np.testing.assert_allclose(stock[both], ours[both], rtol=1.2e-7, atol=0)
        checked += 1
    assert checked == 3


@pytest.mark.parametrize("as_global", [False, True])
def test_backward_keeps_a_one_byte_mask(monkeypatch, as_global):
    """What autograd saves for a layout-invariant dropout is the bool mask (1 byte an element, as
    OneFlow's kernel keeps), not ``m`` in x's dtype; the gradient is still ``m``."""
    from libai_ext.random.layers import Dropout, stochastic

    saved = []
    function = stochastic._scale_kept(stochastic.dropout_scale(0.25))
    forward = function.forward

    def recording(ctx, x, keep):
        out = forward(ctx, x, keep)
        saved.append([(t.dtype, tuple(t.shape)) for t in ctx.saved_tensors])
        return out

    monkeypatch.setattr(function, "forward", staticmethod(recording))
    x = flow.ones(16, 32)
    x = (_one_rank_global(x) if as_global else x).requires_grad_()
    y = Dropout(0.25, randomness="layout_invariant").train()(x)
    y.sum().backward()
    assert saved == [[(flow.bool, (16, 32))]]
    np.testing.assert_array_equal(x.grad.numpy(), y.numpy())


@pytest.mark.parametrize("mode", MODES)
def test_a_fresh_layer_draws_a_steps_masks_again(mode):
    """Inside a trainer step the masks come from (step, call) alone: a resumed run (a fresh layer,
    no state) draws the masks of step t again; outside a step each layer counts its calls."""
    from libai_ext.random.layers import Dropout
    from libai_ext.random.draws import drawing_step

    def layer():
        d = Dropout(0.5, randomness=mode).train()
        d.stream = "probe"
        return d

    x = _one_rank_global(flow.ones(8, 8))
    run = layer()
    seen = []
    for step in range(3):
        with drawing_step(step):
            seen.append([run(x).numpy(), run(x).numpy()])  # two calls a step
    resumed = layer()
    with drawing_step(2):
        again = [resumed(x).numpy(), resumed(x).numpy()]
    for a, b in zip(seen[2], again):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(seen[2][0], seen[2][1]), "the two calls of a step drew one mask"
    assert not np.array_equal(seen[1][0], seen[2][0]), "two steps drew one mask"
    outside = layer()
    assert not np.array_equal(outside(x).numpy(), outside(x).numpy()), "calls outside a step repeated a mask"


def test_graph_dropout_of_oneflow_ignores_its_generator():
    """Why "fast" cannot run natively in a graph: OneFlow 0.9.0's graph dropout draws one mask
    whatever the seed of the generator it is given (eager: one mask per seed)."""
    def generator(seed):
        g = flow.Generator()
        g.manual_seed(seed)
        return g

    class TwoSeeds(flow.nn.Graph):
        def build(self, x):
            return [flow._C.dropout(x, 0.5, True, False, generator(seed)) for seed in (1, 2)]

    x = _one_rank_global(flow.ones(4, 16))
    eager = [flow._C.dropout(x, 0.5, True, False, generator(seed)).numpy() for seed in (1, 2)]
    graph = [y.numpy() for y in TwoSeeds()(x)]
    assert not np.array_equal(*eager)
    np.testing.assert_array_equal(*graph)


def test_fast_mode_in_a_graph_draws_the_counter_masks():
    """Inside GraphBase both modes draw the "layout_invariant" masks, a new one every step."""
    from libai_ext.engine.graph import GraphBase
    from libai_ext.random.layers import Dropout

    class Scaled(flow.nn.Module):
        def __init__(self, mode):
            super().__init__()
            self.w = flow.nn.Parameter(_one_rank_global(flow.ones(16)))
            self.drop = Dropout(0.5, randomness=mode)
            self.drop.stream = "probe"

        def forward(self, x):
            y = self.drop(x * self.w)
            return {"loss": y.sum(), "y": y}

    class OutputsGraph(GraphBase):
        def _forward(self, **kwargs):
            outputs = self.model(**kwargs)
            outputs["loss"].backward()
            return outputs

    x = _one_rank_global(flow.ones(4, 16))
    eager = Scaled("layout_invariant").train()
    expected = [eager(x=x)["y"].numpy() for _ in range(3)]
    model = Scaled("fast").train()
    graph = OutputsGraph(model, flow.optim.SGD(model.parameters(), lr=0.0))
    drawn = [graph(x=x)["y"].numpy() for _ in range(3)]
    assert len({m.tobytes() for m in drawn}) == 3, "a step repeated a mask"
    for step, (a, b) in enumerate(zip(drawn, expected)):
        np.testing.assert_array_equal(a, b, err_msg=f"step {step}")


def test_masks_ignore_the_seed_scope_and_eval_mode():
    from libai_ext import seed_everything
    from libai_ext.random.layers import Dropout

    x = flow.ones(8, 8)
    outputs = []
    for scope in ("global", "rank"):
        seed_everything(7, scope=scope, randomness="layout_invariant")
        d = Dropout(0.5).train()
        d.stream = "probe"
        outputs.append(d(x).numpy())
        assert np.array_equal(d.eval()(x).numpy(), x.numpy())
    np.testing.assert_array_equal(*outputs)


def test_randomness_refused_with_the_key():
    from libai_ext import Dropout, seed_everything
    from libai_ext.random import seed_from_config
    from omegaconf import OmegaConf

    with pytest.raises(ValueError, match=r"train\.randomness='exact' is not one of"):
        seed_from_config(OmegaConf.create({"train": {"seed": 1, "randomness": "exact"}}))
    with pytest.raises(ValueError, match=r"train\.randomness='fastest' is not one of"):
        seed_everything(1, randomness="fastest")
    with pytest.raises(ValueError, match=r"randomness='fast ' is not one of"):
        Dropout(0.1, randomness="fast ")


def test_bad_randomness_stops_every_rank(repo_root, tmp_path):
    args = ["--config-file", os.path.join(repo_root, "configs", "demo_pipeline_cpu.py"),
            f"train.output_dir={tmp_path}/out", "train.randomness=exact"]
    result = launch(os.path.join(repo_root, "tools", "train_net.py"), 2, args, timeout=300, check=False,
                    workdir=str(tmp_path / "logs"), stop_on_failure=False)
    assert_refused_without_hang(result, "train.randomness='exact' is not one of")


@pytest.mark.parametrize("mode", ["layout_invariant", "fast"])
def test_a_batch_holding_each_sample_twice_draws_two_masks_per_sample(mode):
    """LiBai's SimCSE (unsupervised) puts each sentence twice in one batch and needs dropout to give the two
    copies different masks: rows are keyed by their position, not by their values."""
    from libai_ext.random.layers import Dropout
    from libai_ext.random.draws import drawing_step

    d = Dropout(0.5, randomness=mode).train()
    d.stream = "simcse"
    x = _one_rank_global(flow.ones(4, 16).repeat_interleave(2, dim=0))  # rows 2i and 2i+1: sample i twice
    with drawing_step(0):
        kept = d(x).numpy() != 0
    for i in range(4):
        assert not np.array_equal(kept[2 * i], kept[2 * i + 1]), f"sample {i}'s two copies drew one mask"
