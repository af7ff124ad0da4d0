"""On every rank: OneFlow's batch normalisations on a batch split over data-parallel ranks, against 1 rank.

The 1-rank reference is computed in this process on local tensors (OneFlow's own kernel on the whole batch); the
layout's run makes the same module global on the layout's placement (every rank holds it whole) and the same batch
global, split along its first axis over the data-parallel ranks, and takes two training steps, then one step in
eval mode; ``BatchNorm2d`` also takes one training forward inside ``nn.Graph``.  Under ``"fast"`` OneFlow's kernel runs as it is; under ``"layout_invariant"`` libai_ext routes it
(``compat.batch_statistics``).  Writes one record per (module, mode, eager or graph): the largest relative
difference from 1 rank of the outputs, the input's and the weight's gradients, and the running statistics.
"""
import copy

import numpy as np
import oneflow as flow
from common import layout_parser, run_or_die, setup_layout
from libai.utils import distributed as dist

from libai_ext.compat import batch_statistics
from libai_ext.random import modes
from libai_ext.testing import write_rank_result


class ScaledBatchNorm2d(flow.nn.BatchNorm2d):
    """A user's subclass: its own forward around OneFlow's."""

    def forward(self, x):
        return super().forward(x) * 2.0


CASES = {  # name: (module, input shape)
    "BatchNorm1d": (lambda: flow.nn.BatchNorm1d(5), (8, 5)),
    "BatchNorm1d-3d-input": (lambda: flow.nn.BatchNorm1d(3), (8, 3, 6)),
    "BatchNorm2d": (lambda: flow.nn.BatchNorm2d(3), (8, 3, 4, 4)),
    "BatchNorm3d": (lambda: flow.nn.BatchNorm3d(2), (8, 2, 2, 3, 3)),
    "FusedBatchNorm2d": (lambda: flow.nn.FusedBatchNorm2d(3), (8, 3, 4, 4)),
    "subclass-BatchNorm2d": (lambda: ScaledBatchNorm2d(3), (8, 3, 4, 4)),
    "functional-batch_norm": (None, (8, 4, 3)),
}


class Functional(flow.nn.Module):
    """``flow.nn.functional.batch_norm`` called by a module of the user's, with its own buffers."""

    def __init__(self, channels):
        super().__init__()
        self.weight = flow.nn.Parameter(flow.ones(channels))
        self.bias = flow.nn.Parameter(flow.zeros(channels))
        self.register_buffer("running_mean", flow.zeros(channels))
        self.register_buffer("running_var", flow.ones(channels))

    def forward(self, x):
        return flow.nn.functional.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                                             training=self.training)


def build(name):
    make, shape = CASES[name]
    flow.manual_seed(0)
    module = make() if make else Functional(shape[1])
    with flow.no_grad():
        if getattr(module, "weight", None) is not None:
            module.weight.copy_(flow.linspace(0.5, 1.5, module.weight.shape[0]))
            module.bias.copy_(flow.linspace(-0.2, 0.3, module.bias.shape[0]))
    return module, shape


def steps(module, batches, to_input):
    """Two training steps (outputs, input gradient, weight gradient) and one eval step; then the running stats."""
    found = {}
    for step, batch in enumerate(batches):
        module.train(step < 2)
        x = to_input(batch)
        x.requires_grad = True
        y = module(x)
        found[f"out{step}"] = y
        if step < 2:
            weights = to_input(np.cos(np.arange(batch.size, dtype=np.float32)).reshape(batch.shape))
            (y * weights).sum().backward()
            found[f"grad_x{step}"] = x.grad
            found[f"grad_weight{step}"] = module.weight.grad.clone()
            module.weight.grad = None
    found["running_mean"], found["running_var"] = module.running_mean, module.running_var
    return found


def whole(tensor):
    if tensor.is_global:
        tensor = tensor.to_global(sbp=[flow.sbp.broadcast] * len(tensor.sbp)).to_local()
    return tensor.detach().numpy()


def main():
    args = layout_parser().parse_args()
    setup_layout(args)
    placement = dist.get_layer_placement(0)
    batch_sbp = dist.get_nd_sbp([flow.sbp.split(0), flow.sbp.broadcast])
    whole_sbp = dist.get_nd_sbp([flow.sbp.broadcast, flow.sbp.broadcast])
    batch_statistics.route_batch_statistics(modes.layout_invariant)
    for name in CASES:
        module, shape = build(name)
        rng = np.random.RandomState(7)
        batches = [(rng.randn(*shape) * 3 + 1).astype(np.float32) for _ in range(3)]
        with modes_set("fast"):
            reference = {k: whole(v) for k, v in steps(copy.deepcopy(module), batches, flow.tensor).items()}
        for mode in ("fast", "layout_invariant"):
            layout_module = copy.deepcopy(module).to_global(placement=placement, sbp=whole_sbp)
            with modes_set(mode):
                found = steps(layout_module, batches, lambda b: flow.tensor(b).to_global(
                    placement=placement, sbp=whole_sbp).to_global(sbp=batch_sbp))
            differences = {k: float(np.abs(whole(v) - reference[k]).max() / (np.abs(reference[k]).max() + 1e-12))
                           for k, v in found.items()}
            write_rank_result(case=name, mode=mode, differences=differences)
    for mode in ("fast", "layout_invariant"):
        write_rank_result(case="graph-BatchNorm2d", mode=mode, differences=graph_step(placement, whole_sbp, batch_sbp,
                                                                                    mode))


def graph_step(placement, whole_sbp, batch_sbp, mode):
    """One training-mode forward of ``BatchNorm2d`` inside ``nn.Graph`` (where in-place buffer updates are lost):
    the output and the running statistics against 1 rank's."""
    module, shape = build("BatchNorm2d")
    batch = (np.random.RandomState(3).randn(*shape) * 3 + 1).astype(np.float32)
    reference = copy.deepcopy(module)
    expected = {"out0": reference(flow.tensor(batch)).detach().numpy(),
                "running_mean": reference.running_mean.numpy(), "running_var": reference.running_var.numpy()}
    layout_module = copy.deepcopy(module).to_global(placement=placement, sbp=whole_sbp)

    class Step(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.module = layout_module

        def build(self, x):
            return self.module(x)

    with modes_set(mode):
        out = Step()(flow.tensor(batch).to_global(placement=placement, sbp=whole_sbp).to_global(sbp=batch_sbp))
    found = {"out0": out, "running_mean": layout_module.running_mean, "running_var": layout_module.running_var}
    return {k: float(np.abs(whole(v) - expected[k]).max() / (np.abs(expected[k]).max() + 1e-12))
            for k, v in found.items()}


class modes_set:
    def __init__(self, mode):
        self.mode = mode

    def __enter__(self):
        self.before = modes.randomness()
        modes.set_layer_seed(modes.layer_seed(), self.mode)

    def __exit__(self, *exc):
        modes.set_layer_seed(modes.layer_seed(), self.before)


if __name__ == "__main__":
    run_or_die(main)
