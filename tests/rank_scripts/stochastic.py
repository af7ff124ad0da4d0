"""On every rank: dropout / drop-path masks for several input sbps, ours and stock.

``x`` holds each element's global position + 1, so every rank can report, for the
positions it holds, whether they were kept.  The test compares ranks (replicas must
agree, shards must differ) and layouts (the same global mask on 1, 2 and 8 ranks).
"""
import oneflow as flow
import libai.layers
from libai.utils import distributed as dist

from common import layout_parser, setup_layout
from libai_ext import seed_everything
from libai_ext.layers import DropPath, Dropout
from libai_ext.testing import write_rank_result

S, B = flow.sbp.split, flow.sbp.broadcast
SHAPE = (64, 12)
P = 0.5
SBPS = {"S0,B": [S(0), B], "B,S1": [B, S(1)], "S0,S1": [S(0), S(1)]}


def positions(layer_idx, sbp):
    placement = dist.get_layer_placement(layer_idx)
    full = flow.arange(1, SHAPE[0] * SHAPE[1] + 1, dtype=flow.float32, placement=placement,
                       sbp=dist.get_nd_sbp([B, B])).reshape(SHAPE)
    return full.to_global(sbp=dist.get_nd_sbp(sbp))


def kept(x, y, per_sample):
    """{position: kept} for the elements (or samples) this rank holds."""
    if flow.env.get_rank() not in x.placement.ranks.flatten().tolist():
        return {}
    x, y = x.to_local().numpy(), y.to_local().numpy()
    if per_sample:  # a sample is identified by its first element's position
        return {int((x[i, 0] - 1) // SHAPE[1]): bool(y[i, 0] != 0) for i in range(x.shape[0])}
    return {int(p): bool(v != 0) for p, v in zip(x.ravel(), y.ravel())}


def ours(kind, layer_idx):
    layer = (Dropout(P, layer_idx=layer_idx) if kind == "dropout" else DropPath(P, layer_idx=layer_idx))
    layer.stream = f"probe-{kind}"  # the same stream name on every layout
    return layer.train()


def stock(kind, seed_per_rank):
    drop_path = libai.layers.DropPath(P).train()

    def apply(x):  # seeded at call time, right before the draw
        flow.manual_seed(1234 + (flow.env.get_rank() if seed_per_rank else 0))
        return flow.nn.functional.dropout(x, P, training=True) if kind == "dropout" else drop_path(x)
    return apply


def main():
    parser = layout_parser()
    parser.add_argument("--sbps", default="S0,B;B,S1;S0,S1")
    parser.add_argument("--layer-idx", type=int, default=0)
    args = parser.parse_args()
    setup_layout(args)
    seed_everything(1234, scope="rank")  # our layers must not care about the scope
    for sbp_name in args.sbps.split(";"):
        x = positions(args.layer_idx, SBPS[sbp_name])
        for kind in ("dropout", "droppath"):
            impls = {"ours": ours(kind, args.layer_idx), "stock_rank_seed": stock(kind, True),
                     "stock_same_seed": stock(kind, False)}
            for impl, layer in impls.items():
                try:
                    mask = kept(x, layer(x), per_sample=kind == "droppath")
                    error = None
                except Exception as e:  # stock layers may not support every sbp
                    mask, error = {}, f"{type(e).__name__}: {str(e)[:200]}"
                write_rank_result(sbp=sbp_name, kind=kind, impl=impl, error=error,
                                  mask=sorted(mask.items()))


if __name__ == "__main__":
    main()
