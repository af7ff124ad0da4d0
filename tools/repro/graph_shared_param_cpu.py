"""OneFlow 0.9.0: a parameter of one pipeline stage read on another inside `nn.Graph` aborts CPU ranks.

    python tools/repro/graph_shared_param_cpu.py    # launches 2 CPU ranks twice, ~40 s

Two stages, each a `Linear`; stage 1 also multiplies by stage 0's weight, moved with
`to_global(placement=<stage 1>)`, as LiBai's `LMLogits` reads the word embeddings (GPT-2, BERT, T5,
RoBERTa tie their output projection to them).  Traced in a train graph on 2 CPU ranks, the first
step aborts every rank (`register.cpp:75 Check failed: separated_header_mem_ptr() == nullptr`,
from `EpollCommNet::SendActorMsg`).  The same model with the weight copied on its own stage first
(`flow._C.identity(w).to_global(...)`, what `libai_ext.compat.cpu_graph_shared_params` does while a
graph traces) trains.
"""
import sys

COPY = "--copy"


def rank_main(copy):
    import oneflow as flow
    from oneflow import nn
    from oneflow.nn.graph import GraphModule

    stage0, stage1 = flow.placement("cpu", [0]), flow.placement("cpu", [1])
    broadcast = flow.sbp.broadcast

    class TwoStages(nn.Module):
        def __init__(self):
            super().__init__()
            self.first = nn.Linear(4, 4).to_global(placement=stage0, sbp=broadcast)
            self.last = nn.Linear(4, 4).to_global(placement=stage1, sbp=broadcast)

        def forward(self, x):
            tied = flow._C.identity(self.first.weight) if copy else self.first.weight
            h = self.first(x).to_global(placement=stage1)
            return flow.matmul(self.last(h), tied.to_global(placement=stage1)).sum()

    class Train(nn.Graph):
        def __init__(self, model):
            super().__init__()
            self.model = model
            self.add_optimizer(flow.optim.SGD(model.parameters(), lr=0.1))
            self.model.first.to(GraphModule).set_stage(0, stage0)
            self.model.last.to(GraphModule).set_stage(1, stage1)

        def build(self, x):
            loss = self.model(x)
            loss.backward()
            return loss

    graph = Train(TwoStages())
    loss = graph(flow.randn(2, 4, placement=stage0, sbp=broadcast))
    value = loss.to_global(placement=flow.env.all_device_placement("cpu")).to_local().numpy()  # on every rank
    print("STEP DONE", float(value), flush=True)


def main():
    import oneflow as flow

    from _common import launch_on_two_ranks, verdict

    plain_code, plain = launch_on_two_ranks(__file__)
    copy_code, copied = launch_on_two_ranks(__file__, COPY)
    aborted = "separated_header_mem_ptr() == nullptr" in plain
    detail = (f"tied parameter across stages: exit {plain_code}" + (" (register.cpp:75 separated_header_mem_ptr() "
              "== nullptr)" if aborted else "") + f"; copied on its own stage first: exit {copy_code}"
              f"{' (trains)' if 'STEP DONE' in copied else ''}")
    verdict(aborted and copy_code == 0, f"oneflow {flow.__version__} on 2 CPU ranks, {detail}")


if __name__ == "__main__":
    if "--rank" in sys.argv:
        rank_main(COPY in sys.argv)
    else:
        main()
