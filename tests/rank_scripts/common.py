"""Shared set-up for the scripts that tests run on every rank."""
import argparse
import os
import sys
import traceback

import oneflow as flow
from libai.config import LazyCall
from libai.data.build import build_image_train_loader
from oneflow.nn.graph import GraphModule
from omegaconf import DictConfig, OmegaConf

import libai_ext
from libai_ext.compat.get_batch_api import call_get_batch
from libai_ext.engine.batch import on_stage0  # noqa: F401 (re-exported for the rank scripts)
from libai.utils import distributed as dist


def graph_module_settings(graph):
    """``{module name: {"stage": id, "checkpointing": True}}`` for the modules of ``graph.model`` with any.

    The root model is named ``""``; children as in ``named_modules()``.
    """
    table = {}

    def walk(proxy, name):
        block = proxy.to(GraphModule)
        entry = {}
        if block.stage_id is not None:
            entry["stage"] = block.stage_id
        if block.activation_checkpointing:
            entry["checkpointing"] = True
        if entry:
            table[name] = entry
        for child_name, child in proxy._modules.items():
            walk(child, f"{name}.{child_name}" if name else child_name)

    walk(graph.model, "")
    return table


def layout_parser():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dp", type=int, default=0, help="default: world size / (tp * pp)")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--pp", type=int, default=1)
    parser.add_argument("--layers", type=int, default=0, help="pipeline_num_layers (default: pp)")
    return parser


def setup_layout(args):
    libai_ext.apply_patches()
    args.dp = args.dp or flow.env.get_world_size() // (args.tp * args.pp)
    cfg = DictConfig({
        "data_parallel_size": args.dp, "tensor_parallel_size": args.tp,
        "pipeline_parallel_size": args.pp, "pipeline_num_layers": args.layers or args.pp,
    })
    dist.setup_dist_util(cfg)
    util = dist.get_dist_util()
    assert (util.data_parallel_size, util.tensor_parallel_size, util.pipeline_parallel_size) == (
        args.dp, args.tp, args.pp), "launch with nproc = dp * tp * pp"


def setup_layout_and_digits():
    """Parse --dp/--tp/--pp and --data, set the layout up, write the digits folder; returns args."""
    from libai_ext.data import ensure_digits_cifar

    parser = layout_parser()
    parser.add_argument("--data", required=True)
    args = parser.parse_args()
    setup_layout(args)
    ensure_digits_cifar(args.data)
    return args


def replicated_on_stage0(tensor):
    """The whole global ``tensor``, as a local tensor on every stage-0 rank (None elsewhere)."""
    stage0 = dist.get_layer_placement(0)
    replicated = dist.get_nd_sbp([flow.sbp.broadcast, flow.sbp.broadcast])
    tensor = tensor.to_global(placement=stage0).to_global(sbp=replicated)
    return tensor.to_local() if flow.env.get_rank() in stage0.ranks.flatten().tolist() else None


def image_loader_config(dataset, micro_batch, mixup_func=None, **train):
    """The part of a LiBai config that ``DefaultTrainer.build_train_loader`` reads."""
    cfg = OmegaConf.create()
    cfg.graph = dict(enabled=False)
    cfg.train = dict(train_micro_batch_size=micro_batch, test_micro_batch_size=micro_batch, seed=0, **train)
    cfg.dataloader = dict(train=LazyCall(build_image_train_loader)(
        dataset=[dataset], num_workers=0, mixup_func=mixup_func))
    return cfg


def get_batch(trainer, data, mixup_func=None, step=0):
    """``trainer.get_batch`` as the installed LiBai line's trainers call it, at training step ``step``
    (which keys the layout_invariant mode's global mixup, as ``ConsistentBatchTrainer.run_step`` does)."""
    with libai_ext.mixup_step(step):
        return call_get_batch(trainer.get_batch, data, mixup_func)


def run_or_die(main):
    """Run ``main``; on any error print it and end the process at once.

    A rank that raises can block at exit waiting on its peers: dying at once lets the
    harness see the failure.
    """
    try:
        main()
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        os._exit(1)
