"""On every rank: dropout / drop-path outputs per training step, eager vs nn.Graph, on a 2-stage model.

The model has a Dropout called twice per forward and a DropPath on stage 0, a Dropout on
the last stage; the learning rate is 0, so each step's output differs only by its masks.
For every gradient accumulation in ``--accs``, four steps in each mode:

* ``eager``: the micro-batches one by one, each inside ``drawing_step(step, micro, acc)`` as the
  trainer runs them (a step's output: theirs, concatenated);
* ``graph_resumed``: ``libai_ext``'s ``GraphBase``, two steps; then the state dict into a fresh
  model and a fresh graph, two more steps: each graph call inside ``drawing_step(step)``, as the
  trainer runs it (the step alone keys the masks: a resumed run needs nothing else);
* ``plain_graph``: a bare ``nn.Graph`` around the same model: its draw frozen at trace time, as
  every graph had it before ``graph_calls`` (the bug the test must be able to see).

Every rank records every mode's outputs (replicated to all ranks).
"""
import oneflow as flow
from libai.utils import distributed as dist
from oneflow import nn

from common import layout_parser, run_or_die, setup_layout
from libai_ext import seed_everything
from libai_ext.engine.graph import GraphBase
from libai_ext.layers import DropPath, Dropout, name_stochastic_layers
from libai_ext.random.draws import drawing_step
from libai_ext.testing import write_rank_result

B, S0 = flow.sbp.broadcast, flow.sbp.split(0)
ROWS, COLS, STEPS = 4, 6, 4


class TwoStages(nn.Module):
    def __init__(self):
        super().__init__()
        last = dist.get_dist_util().pipeline_parallel_size - 1  # (one layer per stage: setup_layout)
        self.w0 = nn.Parameter(flow.ones(COLS, placement=dist.get_layer_placement(0), sbp=dist.get_nd_sbp([B, B])))
        self.w1 = nn.Parameter(flow.ones(COLS, placement=dist.get_layer_placement(last), sbp=dist.get_nd_sbp([B, B])))
        self.drop0, self.path0 = Dropout(0.5, layer_idx=0), DropPath(0.5, layer_idx=0)
        self.drop1 = Dropout(0.5, layer_idx=last)
        self.last = last

    def forward(self, x):
        h = self.drop0(self.drop0(x * self.w0) + self.path0(x))  # drop0: two calls per forward
        h = h.to_global(placement=dist.get_layer_placement(self.last))
        y = self.drop1(h * self.w1)
        return {"loss": y.sum(), "y": y}


class TrainGraph(GraphBase):
    def _forward(self, **kwargs):  # (GraphBase sums every output as a loss)
        outputs = self.model(**kwargs)
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


def new_model():
    model = TwoStages()
    name_stochastic_layers(model)
    return model.train(), flow.optim.SGD(model.parameters(), lr=0.0)


def inputs(acc):
    values = flow.arange(1, ROWS * acc * COLS + 1, dtype=flow.float32).reshape(ROWS * acc, COLS)
    return values.to_global(placement=dist.get_layer_placement(0), sbp=dist.get_nd_sbp([S0, B]))


def gathered(y):
    """The whole output on every rank, as a nested list."""
    return y.to_global(placement=flow.env.all_device_placement("cpu"), sbp=B).to_local().numpy().tolist()


def eager_micro_batch(model, x, step, micro, acc):
    with drawing_step(step, micro=micro, micro_batches=acc):
        return gathered(model(x=x[micro * ROWS:(micro + 1) * ROWS])["y"])


def eager_steps(acc, steps=STEPS):
    model, _ = new_model()
    x = inputs(acc)
    return [sum((eager_micro_batch(model, x, step, m, acc) for m in range(acc)), []) for step in range(steps)]


def graph_steps(acc, graph, steps, first_step=0):
    x = inputs(acc)
    outputs = []
    for step in range(first_step, first_step + steps):
        with drawing_step(step):
            outputs.append(gathered(graph(x=x)["y"]))
    return outputs


def graph_run(acc, steps=STEPS, state=None, first_step=0):
    model, optimizer = new_model()
    if state is not None:
        model.load_state_dict(state)
    return graph_steps(acc, TrainGraph(model, optimizer, grad_acc_steps=acc), steps, first_step), model


def resumed_run(acc):
    first, model = graph_run(acc, STEPS // 2)
    rest, _ = graph_run(acc, STEPS - STEPS // 2, state=model.state_dict(), first_step=STEPS // 2)
    return first + rest


def plain_graph_run(acc):
    model, optimizer = new_model()
    graph = PlainGraph(model, optimizer)
    if acc > 1:
        graph.config.set_gradient_accumulation_steps(acc)
    return graph_steps(acc, graph, STEPS)


def main():
    parser = layout_parser()
    parser.add_argument("--accs", default="1,2")
    args = parser.parse_args()
    setup_layout(args)
    seed_everything(1234)
    for acc in [int(a) for a in args.accs.split(",")]:
        runs = {"eager": eager_steps(acc), "graph_resumed": resumed_run(acc), "plain_graph": plain_graph_run(acc)}
        for mode, outputs in runs.items():
            write_rank_result(acc=acc, mode=mode, outputs=outputs)


if __name__ == "__main__":
    run_or_die(main)
