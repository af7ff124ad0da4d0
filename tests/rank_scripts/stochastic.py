"""On every rank: dropout / drop-path masks for several placements and sbps, ours and stock.

``x`` holds each element's global position + 1, so every rank can report, for the
positions it holds, whether they were kept.  The test compares ranks (replicas must
agree, shards must differ) and layouts (the same global mask on 1, 2 and 8 ranks).

Placements: LiBai's layer placement (``--layer-idx``), and ones the user built that LiBai's
dist config knows nothing of: all ranks in 1D, and a 2D hierarchy (transposed rank order on
4 ranks, 2 x 4 on 8).  Partial sums (``P``) and local tensors too.
"""
import numpy as np
import oneflow as flow
import libai.layers
from libai.utils import distributed as dist

from common import layout_parser, run_or_die, setup_layout
from libai_ext import seed_everything
from libai_ext.random.layers import DropPath, Dropout
from libai_ext.random.layers.stochastic import apply_keep, dropout_scale
from libai_ext.random.counter_rng import keep_mask, stream_keys
from libai_ext.random.modes import layer_seed
from libai_ext.testing import write_rank_result

S, B, P_SUM = flow.sbp.split, flow.sbp.broadcast, flow.sbp.partial_sum
SHAPE = (64, 12)
P = 0.5
MODES = ("layout_invariant", "fast")
LIBAI_SBPS = {"S0,B": [S(0), B], "B,S1": [B, S(1)], "S0,S1": [S(0), S(1)]}
USER_1D_SBPS = {"S0": [S(0)], "S1": [S(1)], "B": [B]}
USER_2D_SBPS = dict(LIBAI_SBPS, **{"S1,S0": [S(1), S(0)]})
PARTIAL_SBPS = {"1d:P": [P_SUM], "2d:S0,P": [S(0), P_SUM], "2d:P,S1": [P_SUM, S(1)]}


def user_placements():
    world = flow.env.get_world_size()
    ranks = np.arange(world)
    if world == 4:
        grid = ranks.reshape(2, 2).T  # [[0, 2], [1, 3]]: not LiBai's rank order
    elif world == 8:
        grid = ranks.reshape(2, 4)
    else:
        grid = ranks.reshape(1, world)
    return flow.placement("cpu", ranks=ranks.tolist()), flow.placement("cpu", ranks=grid.tolist())


def positions(placement, sbp):
    full = flow.arange(1, SHAPE[0] * SHAPE[1] + 1, dtype=flow.float32, placement=placement,
                       sbp=[B] * len(sbp)).reshape(SHAPE)
    return full.to_global(sbp=sbp)


def kept(x, y, per_sample):
    """{position: kept} for the elements (or samples) this rank holds."""
    if x.is_global:
        if flow.env.get_rank() not in x.placement.ranks.flatten().tolist():
            return {}
        x, y = x.to_local(), y.to_local()
    x, y = x.numpy(), y.numpy()
    if per_sample:  # a sample is identified by its first element's position
        return {int((x[i, 0] - 1) // SHAPE[1]): bool(y[i, 0] != 0) for i in range(x.shape[0])}
    return {int(p): bool(v != 0) for p, v in zip(x.ravel(), y.ravel())}


def ours(kind, mode, layer_idx=0):
    layer = (Dropout(P, layer_idx=layer_idx, randomness=mode) if kind == "dropout"
             else DropPath(P, layer_idx=layer_idx, randomness=mode))
    layer.stream = f"probe-{kind}"  # the same stream name on every layout
    return layer.train()


def stock(kind, seed_per_rank):
    drop_path = libai.layers.DropPath(P).train()

    def apply(x):  # seeded at call time, right before the draw
        flow.manual_seed(1234 + (flow.env.get_rank() if seed_per_rank else 0))
        return flow.nn.functional.dropout(x, P, training=True) if kind == "dropout" else drop_path(x)
    return apply


def impls(kind, layer_idx=0, with_stock=True):
    layers = {mode: ours(kind, mode, layer_idx) for mode in MODES}
    if with_stock:
        layers.update(stock_rank_seed=stock(kind, True), stock_same_seed=stock(kind, False))
    return layers


def global_path_agrees(x):
    """The mask from global ops only (what nn.Graph runs) equals the eager, local-op one."""
    keys = stream_keys(layer_seed(), "probe-dropout", 0)
    eager = ours("dropout", "layout_invariant")(x)
    traced = apply_keep(x, keep_mask(x.shape, P, keys, x.placement, x.sbp), dropout_scale(P))
    if flow.env.get_rank() not in x.placement.ranks.flatten().tolist():
        return None
    return bool(np.array_equal(eager.to_local().numpy(), traced.to_local().numpy()))


def record(where, sbp_name, x, layer_idx=0, with_stock=True):
    if x.is_global:
        write_rank_result(where=where, sbp=sbp_name, kind="dropout", impl="global_path",
                          agrees=global_path_agrees(x), mask=[])
    for kind in ("dropout", "droppath"):
        for impl, layer in impls(kind, layer_idx, with_stock).items():
            try:
                mask = kept(x, layer(x), per_sample=kind == "droppath")
                error = None
            except Exception as e:  # stock layers may not support every sbp
                mask, error = {}, f"{type(e).__name__}: {str(e)[:200]}"
            write_rank_result(where=where, sbp=sbp_name, kind=kind, impl=impl, error=error,
                              mask=sorted(mask.items()))


def partial_sum_of_replicas(x_broadcast, sbp):
    """``x`` as partial sums: each replica holds x / (number of replicas) (no communication)."""
    placement = x_broadcast.placement
    replicas = int(np.prod([placement.ranks.shape[i] for i, s in enumerate(sbp) if s == P_SUM]))
    local_sbp = [B if s == P_SUM else s for s in sbp]
    local = x_broadcast.to_global(sbp=local_sbp).to_local() / replicas
    return local.to_global(placement=placement, sbp=sbp)


def record_partial(name, placement, sbp):
    """Each element of the summed output must be 0 or x / (1 - p): replicas drew one mask."""
    x = positions(placement, [B] * len(sbp))
    x_partial = partial_sum_of_replicas(x, sbp)
    for kind in ("dropout", "droppath"):
        for mode in MODES:
            y_partial = ours(kind, mode)(x_partial)
            y = y_partial.to_global(sbp=[B] * len(sbp))
            xs, ys = x.to_local().numpy(), y.to_local().numpy()
            mixed = int(np.sum(~(np.isclose(ys, 0) | np.isclose(ys, xs / (1 - P)))))
            write_rank_result(where="user", sbp=name, kind=kind, impl=mode, error=None, mixed=mixed,
                              out_sbp=str(y_partial.sbp), mask=sorted(kept(x, y, kind == "droppath").items()))


def main():
    parser = layout_parser()
    parser.add_argument("--sbps", default="S0,B;B,S1;S0,S1")
    parser.add_argument("--layer-idx", type=int, default=0)
    args = parser.parse_args()
    setup_layout(args)
    seed_everything(1234, scope="rank")  # our layers must not care about the scope
    for sbp_name in args.sbps.split(";"):
        placement = dist.get_layer_placement(args.layer_idx)
        x = positions(placement, dist.get_nd_sbp(LIBAI_SBPS[sbp_name]))
        record("libai", sbp_name, x, args.layer_idx)
    record("local", "local", flow.arange(1, SHAPE[0] * SHAPE[1] + 1, dtype=flow.float32).reshape(SHAPE),
           with_stock=False)
    if flow.env.get_world_size() == 1:
        return
    one_d, two_d = user_placements()
    for sbp_name, sbp in USER_1D_SBPS.items():
        record("user", f"1d:{sbp_name}", positions(one_d, sbp))
    for sbp_name, sbp in USER_2D_SBPS.items():
        record("user", f"2d:{sbp_name}", positions(two_d, sbp))
    for name, sbp in PARTIAL_SBPS.items():
        record_partial(name, one_d if name.startswith("1d") else two_d, sbp)


if __name__ == "__main__":
    run_or_die(main)
