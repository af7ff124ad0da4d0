"""Every way a model's forward reaches a routed random op of OneFlow 0.9.0, as one case each.

``CASES[entry point] = (op of the inventory, case(module, layout, rows))``: ``layout`` is the
keyword arguments of a factory (``placement`` + ``sbp``, or ``device``); the case draws a tensor of
``rows`` rows laid out like that, through the entry point named (``oneflow._C.<op>``, its aliases in ``oneflow`` and
``oneflow.nn.functional``, ``Tensor`` methods, ``oneflow.nn.init`` and the ``oneflow.nn`` modules
whose forward reaches the op).  ``Probe`` runs a case inside its forward, as a watched model does.
Used by tests/test_random_ops.py (one rank) and rank_scripts/random_ops.py (4 ranks).
"""
import oneflow as flow
from oneflow import nn

F = flow.nn.functional
ROWS = 8  # dim 0 of every drawn tensor: the batch
P = 0.5


def full(layout, shape, value=0.5, dtype=flow.float32):
    return flow.full(shape, value, dtype=dtype, **layout)


def ramp(layout, shape):
    """Values that differ per element of a row (softmax and argmax inputs)."""
    n = 1
    for s in shape:
        n *= s
    period = ROWS * n // shape[0]  # every ROWS rows repeat: a data-parallel rank's rows are a whole batch's
    values = (flow.arange(n, dtype=flow.float32, **one_dim_weights(layout)).reshape(shape) % period % 7.0) * 0.3
    return values.to_global(sbp=layout["sbp"]) if "sbp" in layout else values


def bool_mask(layout, shape):
    return flow.ones(shape, dtype=flow.bool, **layout)


def one_dim(layout):
    """``layout`` for a 1-D tensor (a split of dim 1 becomes broadcast)."""
    if "sbp" not in layout:
        return layout
    sbp = [flow.sbp.broadcast if s == flow.sbp.split(1) else s for s in layout["sbp"]]
    return dict(layout, sbp=sbp)


CASES = {
    # factories
    "oneflow._C.rand": ("rand", lambda m, lay, n: flow._C.rand(n, 6, **lay)),
    "oneflow.rand": ("rand", lambda m, lay, n: flow.rand((n, 6), **lay)),
    "oneflow._C.randn": ("randn", lambda m, lay, n: flow._C.randn(n, 6, **lay)),
    "oneflow.randn": ("randn", lambda m, lay, n: flow.randn((n, 6), **lay)),
    "oneflow._C.randint": ("randint", lambda m, lay, n: flow._C.randint(0, 100, (n, 6), **lay)),
    "oneflow.randint": ("randint", lambda m, lay, n: flow.randint(7, (n, 6), **lay)),
    "oneflow._C.randint_like": ("randint_like", lambda m, lay, n: flow._C.randint_like(full(lay, (n, 6)), 3, 50)),
    "oneflow.randint_like": ("randint_like", lambda m, lay, n: flow.randint_like(full(lay, (n, 6)), 9)),
    "oneflow._C.randn_like": ("randn_like", lambda m, lay, n: flow._C.randn_like(full(lay, (n, 6)))),
    "oneflow.randn_like": ("randn_like", lambda m, lay, n: flow.randn_like(full(lay, (n, 6)))),
    "oneflow._C.randperm": ("randperm", lambda m, lay, n: flow._C.randperm(12, **one_dim(lay))),
    "oneflow.randperm": ("randperm", lambda m, lay, n: flow.randperm(12, **one_dim(lay))),
    "oneflow._C.normal": ("normal", lambda m, lay, n: flow._C.normal(1.0, 2.0, (n, 6), **lay)),
    "oneflow.normal": ("normal", lambda m, lay, n: flow.normal(-1.0, 0.5, (n, 6), **lay)),
    # draws on a tensor
    "oneflow._C.bernoulli": ("bernoulli", lambda m, lay, n: flow._C.bernoulli(full(lay, (n, 6), 0.3))),
    "oneflow.bernoulli": ("bernoulli", lambda m, lay, n: flow.bernoulli(full(lay, (n, 6)), 0.8)),
    "oneflow.Tensor.bernoulli": ("bernoulli", lambda m, lay, n: full(lay, (n, 6)).bernoulli()),
    "oneflow._C.bernoulli_": ("bernoulli_", lambda m, lay, n: flow._C.bernoulli_(full(lay, (n, 6)), 0.3)),
    "oneflow.Tensor.bernoulli_": ("bernoulli_", lambda m, lay, n: full(lay, (n, 6)).bernoulli_(0.7)),
    "oneflow._C.uniform_": ("uniform_", lambda m, lay, n: flow._C.uniform_(full(lay, (n, 6)), -1.0, 2.0)),
    "oneflow.Tensor.uniform_": ("uniform_", lambda m, lay, n: full(lay, (n, 6)).uniform_(-1, 2)),
    "oneflow.nn.init.uniform_": ("uniform_", lambda m, lay, n: nn.init.uniform_(full(lay, (n, 6)), 0.0, 3.0)),
    "oneflow.Tensor.normal_": ("normal", lambda m, lay, n: full(lay, (n, 6)).normal_(1, 2)),
    "oneflow.nn.init.normal_": ("normal", lambda m, lay, n: nn.init.normal_(full(lay, (n, 6)), 0.0, 3.0)),
    "oneflow.Tensor.trunc_normal_": ("normal", lambda m, lay, n: full(lay, (n, 6)).trunc_normal_(std=0.5)),
    "oneflow.nn.init.trunc_normal_": ("normal", lambda m, lay, n: nn.init.trunc_normal_(full(lay, (n, 6)), std=0.5)),
    "oneflow.Tensor.kaiming_normal_": ("normal", lambda m, lay, n: full(lay, (n, 6)).kaiming_normal_()),
    "oneflow.nn.init.kaiming_normal_": ("normal", lambda m, lay, n: nn.init.kaiming_normal_(full(lay, (n, 6)))),
    "oneflow.Tensor.kaiming_uniform_": ("uniform_", lambda m, lay, n: full(lay, (n, 6)).kaiming_uniform_()),
    "oneflow.nn.init.kaiming_uniform_": ("uniform_", lambda m, lay, n: nn.init.kaiming_uniform_(full(lay, (n, 6)))),
    "oneflow.nn.init.xavier_normal_": ("normal", lambda m, lay, n: nn.init.xavier_normal_(full(lay, (n, 6)))),
    "oneflow.nn.init.xavier_uniform_": ("uniform_", lambda m, lay, n: nn.init.xavier_uniform_(full(lay, (n, 6)))),
    "oneflow._C.exponential_": ("exponential_", lambda m, lay, n: flow._C.exponential_(full(lay, (n, 6)), 2.0)),
    "oneflow.Tensor.exponential_": ("exponential_", lambda m, lay, n: full(lay, (n, 6)).exponential_(0.5)),
    "oneflow._C.gumbel_softmax": ("gumbel_softmax", lambda m, lay, n: flow._C.gumbel_softmax(ramp(lay, (n, 6)), 0.5)),
    "oneflow.nn.functional.gumbel_softmax": (
        "gumbel_softmax", lambda m, lay, n: F.gumbel_softmax(ramp(lay, (n, 6)), 1.0, dim=-1, hard=True)),
    # the dropout family
    "oneflow._C.dropout": ("dropout", lambda m, lay, n: flow._C.dropout(full(lay, (n, 6)), P, True)),
    "oneflow.nn.functional.dropout": ("dropout", lambda m, lay, n: F.dropout(full(lay, (n, 6)), 0.25, training=True)),
    "oneflow.nn.functional.dropout(inplace)": (
        "dropout", lambda m, lay, n: (lambda x: (F.dropout(x, P, True, True), x)[1])(full(lay, (n, 6)))),
    "oneflow.nn.Dropout": ("dropout", lambda m, lay, n: m.mods["Dropout"](full(lay, (n, 6)))),
    "oneflow._C.dropout1d": ("dropout1d", lambda m, lay, n: flow._C.dropout1d(full(lay, (n, 6, 4)), P, True)),
    "oneflow.nn.functional.dropout1d": ("dropout1d", lambda m, lay, n: F.dropout1d(full(lay, (n, 6, 4)), P)),
    "oneflow.nn.Dropout1d": ("dropout1d", lambda m, lay, n: m.mods["Dropout1d"](full(lay, (n, 6, 4)))),
    "oneflow._C.dropout2d": ("dropout2d", lambda m, lay, n: flow._C.dropout2d(full(lay, (n, 6, 2, 2)), P, True)),
    "oneflow.nn.functional.dropout2d": ("dropout2d", lambda m, lay, n: F.dropout2d(full(lay, (n, 6, 2, 2)), P)),
    "oneflow.nn.Dropout2d": ("dropout2d", lambda m, lay, n: m.mods["Dropout2d"](full(lay, (n, 6, 2, 2)))),
    "oneflow._C.dropout3d": ("dropout3d", lambda m, lay, n: flow._C.dropout3d(full(lay, (n, 6, 2, 2, 2)), P, True)),
    "oneflow.nn.functional.dropout3d": ("dropout3d", lambda m, lay, n: F.dropout3d(full(lay, (n, 6, 2, 2, 2)), P)),
    "oneflow.nn.Dropout3d": ("dropout3d", lambda m, lay, n: m.mods["Dropout3d"](full(lay, (n, 6, 2, 2, 2)))),
    "oneflow._C.fused_bias_add_dropout": (
        "fused_bias_add_dropout",
        lambda m, lay, n: flow._C.fused_bias_add_dropout(full(lay, (n, 6)), full(one_dim(lay), (6,), 0.25), p=P, axis=1)),
    "oneflow._C.fused_scale_mask_softmax_dropout": (
        "fused_scale_mask_softmax_dropout",
        lambda m, lay, n: flow._C.fused_scale_mask_softmax_dropout(ramp(lay, (n, 6)), bool_mask(lay, (n, 6)), fill_value=-1e4,
                                                                scale=2.0, p=P)[0]),
    "oneflow._C.fused_bias_add_scale_mask_softmax_dropout": (
        "fused_bias_add_scale_mask_softmax_dropout",
        lambda m, lay, n: flow._C.fused_bias_add_scale_mask_softmax_dropout(
            ramp(lay, (n, 6)), full(lay, (n, 6)), bool_mask(lay, (n, 6)), fill_value=-1e4, scale=0.5, p=P)[0]),
    "oneflow._C.fused_scale_tril_softmax_mask_scale": (
        "fused_scale_tril_softmax_mask_scale",
        lambda m, lay, n: flow._C.fused_scale_tril_softmax_mask_scale(ramp(lay, (n, 6, 6)), p=P, diagonal=0,
                                                                   tril_scale_value=1.0)[0]),
    "oneflow._C.fused_matmul_bias_add_relu_dropout": (
        "fused_matmul_bias_add_relu_dropout",
        lambda m, lay, n: flow._C.fused_matmul_bias_add_relu_dropout(
            ramp(lay, (n, 6)), [full(one_dim_weights(lay), (5, 6), 0.1)], [full(one_dim_weights(lay), (5,), 0.2)],
            False, [P])),
}
# Their scale comes from the tensor's fans, so a data-parallel rank's rows (a smaller tensor) differ in
# scale from the whole batch's; their bits are checked on global layouts.
FAN_SCALED = {name for name in CASES if "kaiming" in name or "xavier" in name}
LOCAL_ONLY = {  # module parameters are local tensors: these run on local inputs only
    "oneflow.nn.FusedMLP": ("fused_matmul_bias_add_relu_dropout", lambda m, lay, n: m.mods["FusedMLP"](ramp(lay, (n, 6)))),
}


def one_dim_weights(layout):
    """A weight for every rank in ``layout``'s placement (replicated)."""
    if "sbp" not in layout:
        return layout
    return dict(layout, sbp=[flow.sbp.broadcast] * len(layout["sbp"]))


class Probe(nn.Module):
    """Runs one case inside its forward (the modules the cases call are its children)."""

    def __init__(self):
        super().__init__()
        self.mods = nn.ModuleDict({
            "Dropout": nn.Dropout(0.3), "Dropout1d": nn.Dropout1d(P), "Dropout2d": nn.Dropout2d(P),
            "Dropout3d": nn.Dropout3d(P), "FusedMLP": nn.FusedMLP(6, [5], 4, hidden_dropout_rate=[P], out_dropout_rate=0.25),
        })
        for parameter in self.mods["FusedMLP"].parameters():
            nn.init.constant_(parameter, 0.1)

    def forward(self, name, layout, rows=ROWS):
        _, case = all_cases(broken=True)[name]
        return case(self, layout, rows)


def all_cases(broken=False):
    return dict(CASES, **LOCAL_ONLY, **(BROKEN_IN_ONEFLOW if broken else {}))


BROKEN_IN_ONEFLOW = {  # Tensor methods the inventory finds reaching an op, which OneFlow 0.9.0 cannot run
    "oneflow.Tensor.xavier_normal_": ("normal", lambda m, lay, n: full(lay, (n, 6)).xavier_normal_()),
    "oneflow.Tensor.xavier_uniform_": ("uniform_", lambda m, lay, n: full(lay, (n, 6)).xavier_uniform_()),
}
