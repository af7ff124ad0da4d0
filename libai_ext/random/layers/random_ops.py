"""OneFlow's random ops as drawn inside a watched forward: each routed to a keyed stream, or refused by name.

``HANDLERS[op](call, OneFlow's op, args, kwargs)`` (called by ``stochastic_ops.route``; ``call`` is a
``stochastic_ops.Call``: the module, the call site, its streams) take OneFlow's arguments and give OneFlow's results.
The dropout family draws its masks from a ``layers.Dropout`` (``call.layer``) in both modes; the other ops draw by
each element's global position (``random.forward_draws``), or under ``"fast"`` from OneFlow's kernel with a
generator seeded per shard.  ``random.audit.REFUSED`` holds the ops no key covers.  What each op does:
docs/randomness.md; every op of ``random.oneflow_random_ops`` is handled or refused (``tests/test_random_ops.py``).
"""
import inspect
import numbers

import oneflow as flow

from .. import forward_draws as fd
from ..audit import REFUSED
from ..counter_rng import local_keep_mask, unit_closed_open, unit_open
from ..forward_draws import Layout
from ..global_index import replicated
from .stochastic import apply_keep

_DEFAULT_FLOAT = flow.float32


_signatures = {}


class ArgumentsNotRead(TypeError):
    """Arguments this module's copy of OneFlow's schema does not take (OneFlow's own error says more)."""


def _bind(stub, args, kwargs):
    signature = _signatures.get(stub)
    if signature is None:
        signature = _signatures[stub] = inspect.signature(stub)
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as error:
        raise ArgumentsNotRead(str(error)) from None
    bound.apply_defaults()
    return bound.arguments


def _size(args, kwargs):
    """A factory's size: ``f(2, 3)``, ``f((2, 3))``, ``f(size=(2, 3))``; the other arguments."""
    kwargs = dict(kwargs)
    if "size" in kwargs:
        size = kwargs.pop("size")
    else:
        size = args[0] if len(args) == 1 and not isinstance(args[0], int) else args
        args = ()
    size = (int(size),) if isinstance(size, int) else tuple(int(s) for s in size)
    return size, args, kwargs


def _created(tensor, requires_grad):
    return tensor.requires_grad_(True) if requires_grad else tensor


def _fast(call, original, args, kwargs, layout):
    """OneFlow's own op with this call's generator (seeded per shard: a global factory gives consistent
    shards whatever the seeds, an op on an input draws each rank's part from its own generator)."""
    kwargs = dict(kwargs, generator=fd.shard_generator_for(call.draw(layout), layout))
    return original(*args, **kwargs)


def _fill(x, values):
    """Write ``values`` (drawn in ``x``'s layout) into ``x``, as OneFlow's in-place draws do."""
    if x.is_lazy:
        raise fd.LayoutDependentDraw("an in-place draw inside nn.Graph (draw a new tensor instead)")
    with flow.no_grad():
        x.copy_(values)
    return x


def _unit(call, x, transform, open_interval=False):
    """``transform(u)`` for ``u`` uniform in [0, 1) (``open_interval``: (0, 1)), float64, laid out like ``x``,
    as ``x``'s dtype: from the counter stream (layout_invariant) or OneFlow's ``rand`` (fast)."""
    layout = Layout.of(x)
    draw = call.draw(layout)
    if call.fast:
        u = flow.rand(*x.shape, dtype=flow.float64, generator=fd.shard_generator_for(draw, layout),
                      **_native_layout(x))
        u = flow.clamp(u, min=2.0 ** -53) if open_interval else u
        return layout.finish(transform(u).to(x.dtype))
    unit = unit_open if open_interval else unit_closed_open
    return fd.counter_values(draw, x.shape, layout, x.dtype, lambda bits: transform(unit(bits)))


# ---- the dropout family ------------------------------------------------------------------------

def _drop(call, x, p, mask_shape=None, mask_sbp=None, op=None):
    """``x`` with a mask of rate ``p`` (``p=0``: x, ``p=1``: zeros): from the call's layer, or for a local
    tensor from the call site's stream by global sample position (the layer's local masks are the same on
    every rank, which data parallelism would repeat across its ranks' samples)."""
    if p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    layer = call.layer(p, op)
    if not x.is_global and not x.is_lazy and not call.fast:
        return apply_keep(x, _local_keep(call, layer, x, mask_shape), layer.scale)
    return layer.drop(x, mask_shape, mask_sbp)


def _local_keep(call, layer, x, mask_shape):
    """The bool keep mask of a local tensor: the bits of the layer's stream at the global sample positions
    ``forward_draws`` gives a local draw (applied with the layer's scale, as the layer applies its own)."""
    draw = call.named_draw(layer.stream, Layout.of(x))  # the bits the layer draws for the same call
    whole, lo, hi, rows = draw.local_box(tuple(mask_shape or x.shape))
    return local_keep_mask(whole, lo, hi, draw.keys(), layer.rate, x.device, rows)


def _dropout_stub(input, p=0.5, training=True, inplace=False, generator=None, *, addend=None):
    pass


def dropout(call, original, args, kwargs):
    a = _bind(_dropout_stub, args, kwargs)
    x, p = a["input"], float(a["p"])
    if not 0.0 <= p <= 1.0:
        return original(*args, **kwargs)  # OneFlow's own error
    if a["training"] and p > 0.0:
        if a["inplace"]:
            x.mul_(_drop(call, flow.ones_like(x), p))
        else:
            x = _drop(call, x, p)
    return x if a["addend"] is None else x + a["addend"]


def _channel_dropout(dims):
    def stub(input, p=0.5, training=True):
        pass

    def handler(call, original, args, kwargs):
        a = _bind(stub, args, kwargs)
        x, p = a["input"], float(a["p"])
        if not a["training"] or p == 0.0:
            return x
        if not 0.0 <= p <= 1.0 or x.ndim not in (dims + 1, dims + 2):
            return original(*args, **kwargs)
        channels = x.ndim - dims  # (N, C) or (C,) then the spatial dims
        shape = tuple(x.shape[:channels]) + (1,) * dims
        sbp = [s if s in [flow.sbp.split(d) for d in range(channels)] else flow.sbp.broadcast for s in x.sbp] \
            if x.is_global else None
        return _drop(call, x, p, shape, sbp)
    return handler


def _fused_bias_add_dropout_stub(a, b, p=0.5, axis=1, generator=None):
    pass


def fused_bias_add_dropout(call, original, args, kwargs):
    a = _bind(_fused_bias_add_dropout_stub, args, kwargs)
    x = flow._C.bias_add(a["a"], a["b"], axis=a["axis"])
    return _drop(call, x, float(a["p"])) if call.owner.training else x


def _refuse_what_oneflow_refuses(a, floats, bool_mask=None):
    """OneFlow 0.9.0 refuses these calls before any kernel runs, on every device: a float argument given
    ``None`` (LiBai passes ``scale=None`` when ``apply_query_key_layer_scaling`` is off), a mask that is not
    bool.  The composite would take them, so the router calls the op for OneFlow's own error instead."""
    for name in floats:
        if not isinstance(a[name], numbers.Real):
            raise ArgumentsNotRead(f"{name}={a[name]!r} is not a float")
    if bool_mask is not None and a[bool_mask].dtype != flow.bool:
        raise ArgumentsNotRead(f"{bool_mask} is {a[bool_mask].dtype}, not oneflow.bool")


def _masked_scores(x, mask, scale, fill_value):
    mask = mask.to(x.dtype)
    return x * mask * scale + fill_value * (1.0 - mask)


def _softmax_dropout(call, scores, p, training):
    probabilities = flow.softmax(scores, dim=-1)
    dropped = _drop(call, probabilities, p) if training and call.owner.training else probabilities
    return dropped, probabilities


def _fused_scale_mask_softmax_dropout_stub(x, mask, fill_value=0.0, scale=1.0, p=0.5, training=True,
                                           generator=None):
    pass


def fused_scale_mask_softmax_dropout(call, original, args, kwargs):
    a = _bind(_fused_scale_mask_softmax_dropout_stub, args, kwargs)
    _refuse_what_oneflow_refuses(a, ("fill_value", "scale", "p"), bool_mask="mask")
    scores = _masked_scores(a["x"], a["mask"], a["scale"], a["fill_value"])
    return _softmax_dropout(call, scores, float(a["p"]), a["training"])


def _fused_bias_add_scale_mask_softmax_dropout_stub(x, bias, mask, fill_value=0.0, scale=1.0, p=0.5,
                                                    training=True, generator=None):
    pass


def fused_bias_add_scale_mask_softmax_dropout(call, original, args, kwargs):
    a = _bind(_fused_bias_add_scale_mask_softmax_dropout_stub, args, kwargs)
    _refuse_what_oneflow_refuses(a, ("fill_value", "scale", "p"))
    scores = _masked_scores(a["x"] + a["bias"], a["mask"], a["scale"], a["fill_value"])
    return _softmax_dropout(call, scores, float(a["p"]), a["training"])


def _fused_scale_tril_stub(a, p=0.5, diagonal=0, tril_scale_value=1.0, tril_fill_value=0.0, generator=None):
    pass


def fused_scale_tril_softmax_mask_scale(call, original, args, kwargs):
    a = _bind(_fused_scale_tril_stub, args, kwargs)
    _refuse_what_oneflow_refuses(a, ("p", "tril_scale_value", "tril_fill_value"))
    x = a["a"]
    lower = flow.tril(flow.ones_like(x), a["diagonal"])
    scores = _masked_scores(x, lower, a["tril_scale_value"], a["tril_fill_value"])
    return _softmax_dropout(call, scores, float(a["p"]), True)


def _fused_mlp_stub(x, weights, biases, skip_final_activation, dropout_rate_list, generator=None):
    pass


def fused_matmul_bias_add_relu_dropout(call, original, args, kwargs):
    """Per layer ``i``: ``x @ w_i.T + b_i``, ReLU (not after the last with ``skip_final_activation``),
    then dropout at ``dropout_rate_list[i]`` (every layer, the last too: OneFlow's kernel does)."""
    a = _bind(_fused_mlp_stub, args, kwargs)
    x, count = a["x"], len(a["weights"])
    for i, (weight, bias, rate) in enumerate(zip(a["weights"], a["biases"], a["dropout_rate_list"])):
        x = flow._C.matmul(x, weight, transpose_b=True) + bias
        if i < count - 1 or not a["skip_final_activation"]:
            x = flow.relu(x)
        x = _drop(call, x, float(rate), op=f"{call.op}[{i}]")
    return x


# ---- draws by global position -----------------------------------------------------------------------

def _factory(kind):
    """``rand`` / ``randn``: ``(size, *, dtype, device | placement + sbp, generator, requires_grad)``."""
    def stub(dtype=None, device=None, placement=None, sbp=None, generator=None, requires_grad=False):
        pass

    def handler(call, original, args, kwargs):
        size, rest, options = _size(args, kwargs)
        a = _bind(stub, rest, options)
        layout = Layout.requested(a["device"], a["placement"], a["sbp"])
        if call.fast:
            return _fast(call, original, args, kwargs, layout)
        dtype = a["dtype"] or _DEFAULT_FLOAT
        draw = call.draw(layout)
        values = fd.uniform(draw, size, layout, dtype) if kind == "uniform" else fd.normal(draw, size, layout, dtype)
        return _created(values, a["requires_grad"])
    return handler


def _like_stub(input, dtype=None, device=None, placement=None, sbp=None, generator=None, requires_grad=False):
    pass


def _layout_like(a, tensor):
    if a["placement"] is not None or a["device"] is not None:
        return Layout.requested(a["device"], a["placement"], a["sbp"])
    return Layout.of(tensor)


def randn_like(call, original, args, kwargs):
    a = _bind(_like_stub, args, kwargs)
    layout = _layout_like(a, a["input"])
    if call.fast:
        return _fast(call, original, args, kwargs, layout)
    values = fd.normal(call.draw(layout), a["input"].shape, layout, a["dtype"] or a["input"].dtype)
    return _created(values, a["requires_grad"])


def _bounds(ints):
    """``(low, high)`` from ``(low, high)`` or ``(high,)``."""
    return (0, ints[0]) if len(ints) == 1 else (ints[0], ints[1])


def randint(call, original, args, kwargs):
    positional = list(args)
    ints = [positional.pop(0) for _ in range(2) if positional and isinstance(positional[0], int)]
    options = dict(kwargs)
    for name in ("low", "high"):
        if name in options:
            ints.append(options.pop(name))
    size, rest, options = _size(positional, options)
    a = _bind(_like_stub, (None,) + tuple(rest), options)
    layout = Layout.requested(a["device"], a["placement"], a["sbp"])
    if call.fast:
        return _fast(call, original, args, kwargs, layout)
    low, high = _bounds(ints)
    return _created(fd.integers(call.draw(layout), size, layout, low, high, a["dtype"] or flow.int64),
                    a["requires_grad"])


def randint_like(call, original, args, kwargs):
    positional, options = list(args), dict(kwargs)
    x = options.pop("x") if "x" in options else positional.pop(0)
    ints = [positional.pop(0) for _ in range(2) if positional and isinstance(positional[0], int)]
    for name in ("low", "high"):
        if name in options:
            ints.append(options.pop(name))
    a = _bind(_like_stub, (x,) + tuple(positional), options)
    layout = _layout_like(a, x)
    if call.fast:
        return _fast(call, original, args, kwargs, layout)
    low, high = _bounds(ints)
    return _created(fd.integers(call.draw(layout), x.shape, layout, low, high, a["dtype"] or flow.int64),
                    a["requires_grad"])


def _randperm_stub(n, generator=None, dtype=flow.int64, device=None, placement=None, sbp=None,
                   requires_grad=False):
    pass


def randperm(call, original, args, kwargs):
    a = _bind(_randperm_stub, args, kwargs)
    layout = Layout.requested(a["device"], a["placement"], a["sbp"])
    if call.fast:
        return _fast(call, original, args, kwargs, layout)
    return _created(fd.permutation(call.draw(layout), a["n"], layout, a["dtype"]), a["requires_grad"])


def _normal_stub(mean, std, size, out=None, dtype=None, device=None, placement=None, sbp=None, generator=None,
                 requires_grad=False):
    pass


def normal(call, original, args, kwargs):
    a = _bind(_normal_stub, args, kwargs)
    out = a["out"]
    layout = Layout.of(out) if out is not None else Layout.requested(a["device"], a["placement"], a["sbp"])
    if call.fast:
        return _fast(call, original, args, kwargs, layout)
    size = (int(a["size"]),) if isinstance(a["size"], int) else tuple(int(s) for s in a["size"])
    dtype = out.dtype if out is not None else a["dtype"] or _DEFAULT_FLOAT
    values = fd.normal(call.draw(layout), size, layout, dtype, float(a["mean"]), float(a["std"]))
    return _fill(out, values) if out is not None else _created(values, a["requires_grad"])


def _bernoulli_stub(input, p=None, dtype=flow.float32, generator=None, inplace=False):
    pass


def _bernoulli(call, original, args, kwargs, inplace):
    a = _bind(_bernoulli_stub, args, kwargs)
    x = a["input"]
    inplace = inplace or a["inplace"]
    probability = float(a["p"]) if a["p"] is not None else x.detach().to(flow.float64)
    draws = _unit(call, x.detach().to(flow.float64), lambda u: u)
    values = (draws < probability).to(x.dtype if inplace else a["dtype"])
    return _fill(x, values) if inplace else values


def bernoulli(call, original, args, kwargs):
    return _bernoulli(call, original, args, kwargs, inplace=False)


def bernoulli_(call, original, args, kwargs):
    return _bernoulli(call, original, args, kwargs, inplace=True)


def _uniform_stub(x, a=0.0, b=1.0):
    pass


def uniform_(call, original, args, kwargs):
    options = dict(kwargs)
    for theirs, ours in (("from", "a"), ("to", "b")):
        if theirs in options:
            options[ours] = options.pop(theirs)
    a = _bind(_uniform_stub, args, options)
    low, high = float(a["a"]), float(a["b"])
    values = _unit(call, a["x"], lambda u: u * (high - low) + low)
    if a["x"].dtype in (flow.float32, flow.float16, flow.bfloat16) and (low, high) == (0.0, 1.0):
        values = flow.clamp(values, max=1.0 - 2.0 ** -24)  # [0, 1) after rounding to float32
    return _fill(a["x"], values)


def _native_layout(x):
    if x.is_global:
        return dict(placement=x.placement, sbp=replicated(x.sbp))
    return dict(device=x.device)


def _exponential_stub(x, lambd=1.0, generator=None):
    pass


def exponential_(call, original, args, kwargs):
    a = _bind(_exponential_stub, args, kwargs)
    rate = float(a["lambd"])
    return _fill(a["x"], _unit(call, a["x"], lambda u: flow.log(u) * (-1.0 / rate), open_interval=True))


def _gumbel_stub(x, tau=1.0, dim=None, hard=False, generator=None):
    pass


def _implicit_dim(ndim):
    """The dim OneFlow's softmax takes when none is given (PyTorch's legacy rule)."""
    return 0 if ndim in (0, 1, 3) else 1


def gumbel_softmax(call, original, args, kwargs):
    """``softmax((x + g) / tau, dim)`` with ``g = -log(-log(u))``; ``hard``: the one-hot of its argmax,
    with the soft sample's gradient (OneFlow's own formula)."""
    a = _bind(_gumbel_stub, args, kwargs)
    x = a["x"]
    gumbels = _unit(call, x, lambda u: -flow.log(-flow.log(u)), open_interval=True)
    soft = flow._C.softmax((x + gumbels) / float(a["tau"]), a["dim"])
    if not a["hard"]:
        return soft
    dim = a["dim"] if a["dim"] is not None else _implicit_dim(x.ndim)
    index = flow.argmax(soft, dim=dim, keepdim=True)
    hard = flow._C.scatter(flow.zeros_like(soft), dim, index, 1.0, inplace=False)
    return hard - soft.detach() + soft


# ---- refused ---------------------------------------------------------------------------------------

def _rnn(call, original, args, kwargs):
    """The RNNs drop between layers with OneFlow's own generator: refused where they would draw."""
    values = dict(kwargs)
    positions = (5, 6) if len(args) > 3 and isinstance(args[3], bool) else (6, 7)  # input / packed-data schema
    for name, position in zip(("dropout", "train"), positions):
        if name not in values and len(args) > position:
            values[name] = args[position]
    if float(values.get("dropout", 0.0)) > 0.0 and values.get("train", False):
        call.refuse(f"oneflow {call.op} with dropout={values['dropout']} in training ({REFUSED[call.op]})")
    return original(*args, **kwargs)


HANDLERS = {
    "dropout": dropout, "dropout1d": _channel_dropout(1), "dropout2d": _channel_dropout(2),
    "dropout3d": _channel_dropout(3), "fused_bias_add_dropout": fused_bias_add_dropout,
    "fused_scale_mask_softmax_dropout": fused_scale_mask_softmax_dropout,
    "fused_bias_add_scale_mask_softmax_dropout": fused_bias_add_scale_mask_softmax_dropout,
    "fused_scale_tril_softmax_mask_scale": fused_scale_tril_softmax_mask_scale,
    "fused_matmul_bias_add_relu_dropout": fused_matmul_bias_add_relu_dropout,
    "rand": _factory("uniform"), "randn": _factory("normal"), "randn_like": randn_like, "randint": randint,
    "randint_like": randint_like, "randperm": randperm, "normal": normal, "bernoulli": bernoulli,
    "bernoulli_": bernoulli_, "uniform_": uniform_, "exponential_": exponential_, "gumbel_softmax": gumbel_softmax,
    "rnn_tanh": _rnn, "rnn_relu": _rnn, "lstm": _rnn, "gru": _rnn,
}
