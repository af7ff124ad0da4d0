"""On every rank of a tp2 layout: a CPU train graph whose column-parallel output, with a bias, is sliced along its
split axis (ChatGLM's ``query_key_value``; tools/repro/graph_column_bias_cpu.py aborts OneFlow with it), through
``libai_ext``'s ``StepFedGraph``: refused before the first step with ``GraphConfigError``; the same layer without its
bias trains one step.  Records ``{"bias": bool, "outcome": "refused" | "trained", "message": ...}`` for each."""
import oneflow as flow
from libai.layers import Linear
from libai.utils import distributed as dist
from oneflow import nn

from common import layout_parser, run_or_die, setup_layout
from libai_ext.engine.graph import GraphConfigError, StepFedGraph
from libai_ext.testing import write_rank_result


class Sliced(nn.Module):
    def __init__(self, bias):
        super().__init__()
        self.query_key_value = Linear(64, 64, bias=bias, parallel="col", layer_idx=0)

    def forward(self, x):
        return self.query_key_value(x)[..., :32].mean()


class Train(StepFedGraph, nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model
        self.add_optimizer(flow.optim.SGD(model.parameters(), lr=0.1))

    def build(self, x):
        loss = self.model(x)
        loss.backward()
        return loss


def main():
    setup_layout(layout_parser().parse_args())
    x = flow.randn(64, 2, 64).to_global(placement=dist.get_layer_placement(0),
                                        sbp=dist.get_nd_sbp([flow.sbp.broadcast, flow.sbp.broadcast]))
    for bias in (True, False):
        try:
            Train(Sliced(bias))(x)
            write_rank_result(bias=bias, outcome="trained")
        except GraphConfigError as error:
            write_rank_result(bias=bias, outcome="refused", message=str(error))


if __name__ == "__main__":
    run_or_die(main)
