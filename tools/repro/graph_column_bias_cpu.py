"""OneFlow 0.9.0: a tp2 train graph on CPU ranks aborts when it slices a column-parallel output that has a bias.

    python tools/repro/graph_column_bias_cpu.py    # LiBai (either line), launches 2 CPU ranks twice, ~40 s

LiBai's ``Linear(parallel="col")`` on tensor_parallel_size=2, its output (split along the last axis) sliced along
that axis, as ChatGLM splits its ``query_key_value`` output (which has a bias, ``add_qkv_bias``) into query, key
and value.  Traced in a train graph, the first step aborts every rank (``register.cpp:75 Check failed:
separated_header_mem_ptr() == nullptr``, from ``EpollCommNet::SendActorMsg``).  The same layer without its bias
trains; so does the column-parallel output into a row-parallel layer (LiBai's GPT-2, BERT, Llama).  Eager mode
trains both.
"""
import os
import sys

NO_BIAS = "--no-bias"


def rank_main(bias):
    import oneflow as flow
    from oneflow import nn

    from _common import layout
    from libai.layers import Linear

    dist = layout(tp=2)

    class Sliced(nn.Module):
        def __init__(self):
            super().__init__()
            self.query_key_value = Linear(64, 64, bias=bias, parallel="col", layer_idx=0)

        def forward(self, x):
            return self.query_key_value(x)[..., :32].mean()  # the query part, across both ranks' columns

    class Train(nn.Graph):
        def __init__(self, model):
            super().__init__()
            self.model = model
            self.add_optimizer(flow.optim.SGD(model.parameters(), lr=0.1))

        def build(self, x):
            loss = self.model(x)
            loss.backward()
            return loss

    x = flow.randn(64, 2, 64).to_global(placement=dist.get_layer_placement(0),
                                        sbp=dist.get_nd_sbp([flow.sbp.broadcast, flow.sbp.broadcast]))
    print("STEP DONE", float(Train(Sliced())(x).to_local().numpy()), flush=True)


def main():
    import oneflow as flow

    from _common import launch_on_two_ranks, libai_version, verdict

    bias_code, with_bias = launch_on_two_ranks(__file__)
    plain_code, without = launch_on_two_ranks(__file__, NO_BIAS)
    aborted = "separated_header_mem_ptr() == nullptr" in with_bias
    detail = (f"column-parallel output with a bias, sliced: exit {bias_code}" +
              (" (register.cpp:75 separated_header_mem_ptr() == nullptr)" if aborted else "") +
              f"; without the bias: exit {plain_code}{' (trains)' if 'STEP DONE' in without else ''}")
    verdict(aborted and plain_code == 0, f"oneflow {flow.__version__}, libai {libai_version()}, 2 CPU ranks: {detail}")


if __name__ == "__main__":
    if "--rank" in sys.argv:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        rank_main(NO_BIAS not in sys.argv)
    else:
        main()
