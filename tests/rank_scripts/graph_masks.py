"""On every rank: dropout / drop-path outputs per training step, eager vs nn.Graph, on a 2-stage model.

The model has a Dropout called twice per forward and a DropPath on stage 0, a Dropout on
the last stage; the learning rate is 0, so each step's output differs only by its masks.  It
returns a scalar fingerprint of its masked output (``sum(y * [1, 2, ...])``, exact in float32),
as LiBai 0.1.1's ``GraphBase`` sums every output as a loss.
For every gradient accumulation in ``--accs``, four steps in each mode:

* ``eager``: the micro-batches one by one, each inside ``drawing_step(step, micro, acc)`` as the
  trainer runs them (a step's output: theirs, concatenated);
* ``graph_resumed``: ``libai_ext``'s ``GraphBase``, two steps; then the state dict into a fresh
  model and a fresh graph, two more steps: each graph call inside ``drawing_step(step)``, as the
  trainer runs it (the step alone keys the masks: a resumed run needs nothing else);
* ``libai_graph``: LiBai's own ``libai.models.utils.GraphBase`` (as LiBai's
  ``configs/common/models/graph.py`` names it) through ``feed_step``, as ``ConsistentBatchTrainer``
  builds it (on LiBai 0.1.1 with ``compat.graph_proxy_v0_1``);
* ``user_graph``: a user's subclass of LiBai's ``GraphBase`` with its own ``build`` (it returns an
  extra output LiBai 0.1.1's ``build`` would sum as a loss), through ``feed_step``: its override
  runs (it counts its traces) and its steps draw the eager masks;
* ``stock_graph``: stock LiBai: the model with OneFlow's ``nn.Dropout`` (LiBai's layers use it) in
  LiBai's ``GraphBase``, and ``stock_eager``, the same model in eager mode (what stock's graph draws);
* ``unkeyed``: a bare ``nn.Graph`` around libai_ext's layers: its first call must fail, naming
  the layer (a frozen mask is impossible); records the error message;
* ``keyed_ops``: how many ``libai_ext_keyed_dropout`` ops (``libai_ext.random.keyed_op``) each compiled
  ``graph_resumed`` graph holds (0 where the op library is not built: the int32-op path).

Every rank records every mode's outputs (replicated to all ranks).
"""
import inspect

import oneflow as flow
from libai.models.utils import GraphBase as LibaiGraphBase
from libai.utils import distributed as dist
from omegaconf import OmegaConf
from oneflow import nn

from common import layout_parser, run_or_die, setup_layout
from libai_ext import seed_everything
from libai_ext.compat import graph_proxy_v0_1
from libai_ext.engine.graph import GraphBase, feed_step
from libai_ext.random.layers import DropPath, Dropout, UnkeyedGraphDraw, name_stochastic_layers
from libai_ext.random import keyed_op
from libai_ext.random.draws import drawing_step
from libai_ext.testing import write_rank_result

B, S0 = flow.sbp.broadcast, flow.sbp.split(0)
ROWS, COLS, STEPS = 4, 6, 4


class TwoStages(nn.Module):
    def __init__(self, stock=False):
        super().__init__()
        last = dist.get_dist_util().pipeline_parallel_size - 1  # (one layer per stage: setup_layout)
        self.w0 = nn.Parameter(flow.ones(COLS, placement=dist.get_layer_placement(0), sbp=dist.get_nd_sbp([B, B])))
        self.w1 = nn.Parameter(flow.ones(COLS, placement=dist.get_layer_placement(last), sbp=dist.get_nd_sbp([B, B])))
        if stock:
            self.drop0, self.path0, self.drop1 = nn.Dropout(0.5), nn.Identity(), nn.Dropout(0.5)
        else:
            self.drop0, self.path0 = Dropout(0.5, layer_idx=0), DropPath(0.5, layer_idx=0)
            self.drop1 = Dropout(0.5, layer_idx=last)
        self.last = last

    def forward(self, x):
        h = self.drop0(self.drop0(x * self.w0) + self.path0(x))  # drop0: two calls per forward
        h = h.to_global(placement=dist.get_layer_placement(self.last))
        y = self.drop1(h * self.w1)
        code = flow.arange(1, ROWS * COLS + 1, dtype=y.dtype, placement=y.placement, sbp=B).reshape(ROWS, COLS)
        return {"loss": y.sum(), "y": (y * code.to_global(sbp=y.sbp)).sum()}


class TrainGraph(GraphBase):
    def _forward(self, **kwargs):  # (GraphBase sums every output as a loss)
        outputs = self.model(**kwargs)
        outputs["loss"].backward()
        return outputs


class UserGraph(LibaiGraphBase):
    """A user's subclass of LiBai's GraphBase with a build of its own."""
    traces = 0

    def build(self, x):
        UserGraph.traces += 1
        outputs = self.model(x=x)
        outputs["loss"].backward()
        return outputs


class PlainGraph(nn.Graph):
    def __init__(self, model, optimizer):
        super().__init__()
        self.model = model
        self.add_optimizer(optimizer)

    def build(self, x):
        outputs = self.model(x=x)
        outputs["loss"].backward()
        return outputs


def new_model(stock=False):
    model = TwoStages(stock)
    name_stochastic_layers(model)
    return model.train(), flow.optim.SGD(model.parameters(), lr=0.0)


def inputs(acc):
    values = flow.arange(1, ROWS * acc * COLS + 1, dtype=flow.float32).reshape(ROWS * acc, COLS)
    return values.to_global(placement=dist.get_layer_placement(0), sbp=dist.get_nd_sbp([S0, B]))


def gathered(y):
    """The whole output on every rank, as a list (one fingerprint per micro-batch)."""
    return y.to_global(placement=flow.env.all_device_placement("cpu"), sbp=B).to_local().numpy().tolist()


def eager_micro_batch(model, x, step, micro, acc):
    with drawing_step(step, micro=micro, micro_batches=acc):
        return [gathered(model(x=x[micro * ROWS:(micro + 1) * ROWS])["y"])]


def eager_steps(acc, steps=STEPS, stock=False):
    model, _ = new_model(stock)
    x = inputs(acc)
    return [sum((eager_micro_batch(model, x, step, m, acc) for m in range(acc)), []) for step in range(steps)]


def graph_steps(acc, graph, steps, first_step=0):
    x = inputs(acc)
    outputs = []
    for step in range(first_step, first_step + steps):
        with drawing_step(step):
            outputs.append(gathered(flow.reshape(graph(x=x)["y"], (-1,))))
    return outputs


KEYED_OPS = []  # per graph_run graph: its keyed-dropout ops


def graph_run(acc, steps=STEPS, state=None, first_step=0):
    model, optimizer = new_model()
    if state is not None:
        model.load_state_dict(state)
    graph = TrainGraph(model, optimizer, grad_acc_steps=acc)
    outputs = graph_steps(acc, graph, steps, first_step)
    KEYED_OPS.append(sum(op.HasField("user_conf") and op.user_conf.op_type_name == keyed_op.OP
                         for op in graph._compiled_job_proto.net.op))
    return outputs, model


def resumed_run(acc):
    first, model = graph_run(acc, STEPS // 2)
    rest, _ = graph_run(acc, STEPS - STEPS // 2, state=model.state_dict(), first_step=STEPS // 2)
    return first + rest


def libai_graph_run(acc, graph_class=LibaiGraphBase, stock=False):
    """LiBai's GraphBase (or a subclass) with LiBai's arguments, as ConsistentBatchTrainer builds it."""
    model, optimizer = new_model(stock)
    graph_proxy_v0_1.apply()  # (LiBai 0.1.1 only: its GraphBase reads .origin)
    main_arguments = {"global_mode": OmegaConf.create({"enabled": False})} if "global_mode" in inspect.signature(
        LibaiGraphBase.__init__).parameters else {}  # what LiBai main's build_graph passes
    graph = graph_class(model, optimizer, lr_scheduler=None, grad_acc_steps=acc, is_train=True, **main_arguments)
    return graph_steps(acc, graph if stock else feed_step(graph), STEPS)


def unkeyed_error(acc):
    model, optimizer = new_model()
    graph = PlainGraph(model, optimizer)
    if acc > 1:
        graph.config.set_gradient_accumulation_steps(acc)
    try:
        graph_steps(acc, graph, 1)
    except UnkeyedGraphDraw as error:
        return str(error)
    return None


def main():
    parser = layout_parser()
    parser.add_argument("--accs", default="1,2")
    args = parser.parse_args()
    setup_layout(args)
    seed_everything(1234)
    for acc in [int(a) for a in args.accs.split(",")]:
        runs = {"eager": eager_steps(acc), "graph_resumed": resumed_run(acc), "libai_graph": libai_graph_run(acc),
                "user_graph": libai_graph_run(acc, UserGraph),
                "stock_eager": eager_steps(acc, stock=True), "stock_graph": libai_graph_run(acc, stock=True)}
        for mode, outputs in runs.items():
            write_rank_result(acc=acc, mode=mode, outputs=outputs)
        write_rank_result(acc=acc, mode="user_graph_traces", outputs=UserGraph.traces)
        write_rank_result(acc=acc, mode="unkeyed", outputs=unkeyed_error(acc))
        write_rank_result(acc=acc, mode="keyed_ops", outputs=KEYED_OPS[-2:])


if __name__ == "__main__":
    run_or_die(main)
