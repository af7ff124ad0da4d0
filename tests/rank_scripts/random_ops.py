"""On every rank of 4: each routed random op through each entry point (``random_op_cases``) inside a
watched forward, on global tensors of six layouts and on local tensors under data parallelism, routed
and then stock (OneFlow's own ops, each rank seeded with seed + rank as LiBai main's train_net does).

Global results are gathered whole (rank 0 reports them); under data parallelism each rank reports
its own rows.  tests/test_random_ops.py compares them with 1 rank.
"""
import oneflow as flow

from common import run_or_die
from libai_ext import seed_everything
from libai_ext.random.layers import stochastic_ops
from libai_ext.random.draws import drawing_step
from libai_ext.testing import write_rank_result
from random_op_cases import CASES, ROWS, Probe, all_cases

S, B = flow.sbp.split, flow.sbp.broadcast
STEP = 7
SEED = 5


def layouts():
    flat = flow.placement("cpu", [0, 1, 2, 3])
    grid = flow.placement("cpu", [[0, 1], [2, 3]])
    return {"1d:S0": dict(placement=flat, sbp=[S(0)]), "1d:S1": dict(placement=flat, sbp=[S(1)]),
            "1d:B": dict(placement=flat, sbp=[B]), "2d:S0,B": dict(placement=grid, sbp=[S(0), B]),
            "2d:B,S1": dict(placement=grid, sbp=[B, S(1)]), "2d:S0,S1": dict(placement=grid, sbp=[S(0), S(1)])}


def first(y):
    return y[0] if isinstance(y, (tuple, list)) else y


def run(model, name, layout, **step):
    flow.manual_seed(flow.env.get_rank())  # stock: seed + rank, as LiBai main's train_net seeds
    try:
        with drawing_step(STEP, **step):
            y = first(model(name, layout))
        if y.is_global:
            y = y.to_global(sbp=[B] * len(y.sbp))
            y = y.to_local()
        return y.numpy().tolist(), None
    except Exception as error:  # stock fails on some (no CPU kernel, dropout1d/2d/3d's own check)
        return None, f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"


def main():
    seed_everything(SEED)
    stochastic_ops.route_stochastic_ops()
    model = Probe()
    stochastic_ops.watch_model(model)
    rank = flow.env.get_rank()
    for mode in ("routed", "stock"):
        if mode == "stock":
            stochastic_ops.unroute_stochastic_ops()
        for layout_name, layout in layouts().items():
            for name in CASES:
                values, error = run(model, name, layout)
                if rank == 0:
                    write_rank_result(mode=mode, layout=layout_name, case=name, values=values, error=error)
        for name in all_cases():  # local tensors: this rank's rows of a 4-way data-parallel batch
            values, error = run(model, name, dict(device="cpu"), data_parallel=4, batch_rows=4 * ROWS,
                                data_parallel_rank=rank)
            write_rank_result(mode=mode, layout="local:dp4", case=name, values=values, error=error)
    write_rank_result(mode="done", layout=None, case=None, values=None, error=None)


if __name__ == "__main__":
    run_or_die(main)
