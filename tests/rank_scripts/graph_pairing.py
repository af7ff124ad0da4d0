"""On every rank: rank-dependent local batches through get_batch and one LiBai GraphTrainer step.

The batches are those of ``pairing.py``: image value == label id (or, with mixup, the
mixed-up id ``sum_c label[c] * c``), each rank holding the samples its trainer's sampler
would read (the same samples on every rank at dp=1, as in real LiBai), with its own
numpy stream for mixup.  The train graph runs a
two-stage model whose output ``mismatch`` counts, on the last stage, the rows whose image
id (read on stage 0) differs from its label id.  LiBai's own ``GraphTrainer.run_step``
calls ``get_batch(data, [input device,] loader.mixup_func)`` and the graph, as ``DefaultTrainer`` does
with ``graph.enabled=True``; rank 0 records the count it logged, per (trainer, mixup).
"""

import numpy as np
import oneflow as flow
from flowvision.data import Mixup
from libai.engine.trainer import GraphTrainer
from libai.utils import distributed as dist
from libai.utils.events import EventStorage
from oneflow import nn

from common import graph_module_settings, layout_parser, run_or_die, setup_layout
from libai_ext import mixup_step
from libai_ext.compat.get_batch_api import run_step_arguments
from libai_ext.engine.graph import GraphBase
from libai_ext.testing import write_rank_result
from pairing import CASES, NUM_CLASSES, local_batch

TRAINERS = {name: CASES[name] for name in ("stock", "fixed")}  # (trainer, sampler shard)


def replicated():
    return dist.get_nd_sbp([flow.sbp.broadcast, flow.sbp.broadcast])


class ReadImageIds(nn.Module):
    """Stage 0: each row's id, read from its image (the weight keeps the module on stage 0)."""

    def __init__(self):
        super().__init__()
        self.layer_idx = 0
        self.weight = nn.Parameter(flow.ones(1, placement=dist.get_layer_placement(0), sbp=replicated()))

    def forward(self, images):
        return images[:, 0, 0, 0] * self.weight


class CountMismatches(nn.Module):
    """Last stage: number of rows whose image id is not their label id."""

    def __init__(self):
        super().__init__()
        self.layer_idx = -1
        last = dist.get_layer_placement(-1)
        self.bias = nn.Parameter(flow.zeros(1, placement=last, sbp=replicated()))
        self.register_buffer("class_ids", flow.arange(NUM_CLASSES, dtype=flow.float32).to_global(
            placement=last, sbp=replicated()))

    def forward(self, image_ids, labels):
        label_ids = labels.to(flow.float32)
        if labels.ndim == 2:  # mixup: soft rows -> mixed-up id
            label_ids = (labels * self.class_ids).sum(-1)
        wrong = ((image_ids - label_ids).abs() > 1e-3).to(flow.float32).sum()
        return wrong + 0 * self.bias.sum()  # a gradient path, so the train graph has something to update


class PairCheckModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.read = ReadImageIds()
        self.check = CountMismatches()

    def forward(self, images, labels, **unused):
        return {"mismatch": self.check(self.read(images), labels)}


class OneBatchLoader(list):
    """What GraphTrainer needs from a LiBai loader: iteration and ``mixup_func``."""

    def __init__(self, batch, mixup_func):
        super().__init__([batch])
        self.mixup_func = mixup_func


def main():
    args = layout_parser().parse_args()
    setup_layout(args)
    rank = flow.env.get_rank()
    np.random.seed(1234 + rank)  # unseeded augmentation: a different numpy stream per rank
    mixup = Mixup(mixup_alpha=1.0, cutmix_alpha=0.0, prob=1.0, label_smoothing=0.0, num_classes=NUM_CLASSES)
    graphs = []  # kept to the end: a multi-rank graph destroyed while a peer still sends to it aborts OneFlow 0.9.0
    # (comm_network.cpp:33 waiting_list.empty(), in CopyCommNetActor's destructor; seen once, dp2 x pp2)
    for use_mixup in (False, True):
        model = PairCheckModel()
        optimizer = flow.optim.SGD(model.parameters(), lr=0.0)
        graph = GraphBase(model, optimizer, is_train=True)
        graphs.append(graph)
        for name, (trainer_cls, shard) in TRAINERS.items():
            loader = OneBatchLoader(local_batch(shard(), args.dp, with_aux=False), mixup if use_mixup else None)
            with EventStorage(0) as storage:
                with mixup_step(0):  # what ConsistentBatchTrainer.run_step sets around LiBai's run_step
                    GraphTrainer(graph, loader).run_step(trainer_cls.get_batch, *run_step_arguments())
                if rank == 0:
                    write_rank_result(
                        trainer=name, mixup=use_mixup,
                        mismatch=float(storage.history("total_loss").latest()),  # the only output
                        rows=len(local_batch(0, args.dp, False).get("labels").tensor) * args.dp,
                        modules=graph_module_settings(graph))


if __name__ == "__main__":
    run_or_die(main)
