"""OneFlow's stochastic functions inside a model's forward, drawn from ``libai_ext``'s streams.

``route_stochastic_ops()`` (the trainer calls it once per process; explicit, idempotent) replaces
these functions under every name code reaches them by (``oneflow._C.<name>``, ``oneflow.<name>``,
``oneflow.nn.functional.<name>``):

* the dropout family, with OneFlow's arguments and results (the semantics OneFlow's own tests
  state; the fused ones have no CPU kernel in 0.9.0, so this also lets LiBai's fused configs, and
  LiBai main's Swin, which hard-codes one, run on CPU):

  - ``dropout(x, p, training, inplace, generator, addend)`` (``F.dropout``);
  - ``fused_bias_add_dropout(x, bias, p, axis)``: dropout of ``bias_add(x, bias, axis)``;
  - ``fused_scale_mask_softmax_dropout(x, mask, fill_value, scale, p)``: dropout of
    ``softmax(x * mask * scale + fill_value * (1 - mask))``; returns ``(dropped, softmax)``;
  - ``fused_scale_tril_softmax_mask_scale(x, p, diagonal, tril_scale_value, tril_fill_value)``:
    the same with the lower triangle from ``diagonal`` as the mask.

  Each call from a watched model (``watch_model``: the trainer's) draws from the stream of the
  module whose ``forward`` made it (the ``self`` of the calling frame): for LiBai's layers the ``Dropout`` of the op's role (``conversion.ROLES``), so
  fused and unfused paths draw the same masks; for any other module a stream of its own named
  ``<module name>:<op>``.  A fused op drops in training only (its module's mode).  A call from
  code that is no module's ``forward`` cannot be keyed: inside a model's forward it is refused
  under ``train.randomness="layout_invariant"``, naming the op and the call site, and runs
  OneFlow's own op with a warning under ``"fast"``.
* OneFlow's random factories and in-place draws (``random.oneflow_draws`` watches them):
  inside the forward of a watched model's module (``watch_model``: the trainer's model; found on
  the call stack, so an exception leaves nothing behind) they draw from OneFlow's generators,
  which depend on the rank and the layout: refused under "layout_invariant", warned about once per
  call site under "fast".  Anywhere else (data augmentation, initial weights) they are OneFlow's own.
"""
import logging
import sys
import weakref

import oneflow as flow
from oneflow import nn
from oneflow.nn.graph.proxy import ProxyModule

from ..random import modes, oneflow_draws
from .conversion import roles_of
from .stochastic import Dropout

logger = logging.getLogger(__name__)

_NAMESPACES = (flow._C, flow, flow.nn.functional)

_originals = {}       # (namespace, name) -> OneFlow's own
_watched = weakref.WeakValueDictionary()  # id(module) -> module of a watched model
_module_names = {}    # id(module) -> qualified name (``watch_model``)
_STACK_DEPTH = 64     # frames searched for a watched module's forward
_own_streams = {}     # (id(module), op, p) -> Dropout of a module with no role for the op
_warned_sites = set()


class StochasticOpError(RuntimeError):
    """A stochastic op inside a model's forward that libai_ext cannot key by global position."""


def _native(name):
    return _originals.get((flow._C, name), getattr(flow._C, name))


def _site(frame):
    return f"{frame.f_code.co_filename}:{frame.f_lineno} ({frame.f_code.co_name})"


def _caller():
    """``(module or None, frame)`` of the code that called a routed function (frame 0 is
    ``_caller``, 1 the routed function, 2 its caller)."""
    frame = sys._getframe(2)
    return _module_of(frame), frame


def _module_of(frame):
    owner = frame.f_locals.get("self")
    if isinstance(owner, ProxyModule):
        owner = owner.to(nn.Module)
    return owner if isinstance(owner, nn.Module) else None


def in_model_forward(frame):
    """Whether ``frame`` runs inside the forward of a watched model's module."""
    for _ in range(_STACK_DEPTH):
        if frame is None:
            return False
        if frame.f_code.co_name == "forward":
            owner = _module_of(frame)
            if owner is not None and _watched.get(id(owner)) is owner:
                return True
        frame = frame.f_back
    return False


def watch_model(model):
    """Treat ``model``'s forward as training's: name its modules (streams of modules with no role are
    named by them) and guard OneFlow's random factories inside it."""
    for name, module in model.named_modules():
        _module_names[id(module)] = name or "model"
        _watched[id(module)] = module


def _refuse_or_warn(what, site):
    message = (f"{what} at {site}: libai_ext cannot draw it from a stream keyed by global position, so "
               "training would depend on the parallel layout")
    if modes.randomness() == "layout_invariant":
        raise StochasticOpError(message + " (train.randomness='layout_invariant'; use a layer of libai_ext.layers, "
                                "or train.randomness='fast')")
    if site not in _warned_sites:
        _warned_sites.add(site)
        logger.warning(message + " (train.randomness='fast': OneFlow's generator draws it)")


def _layer_for(owner, frame, op, p):
    """The ``Dropout`` drawing ``op`` for ``owner``; None (after refusing or warning inside a
    model's forward) where the caller is no module."""
    if owner is None or _watched.get(id(owner)) is not owner:
        if owner is None and in_model_forward(frame):
            _refuse_or_warn(f"oneflow {op} called outside any module's forward", _site(frame))
        return None  # (a module of no watched model: not training's, OneFlow's own)
    role = roles_of(owner).get(op)
    layer = getattr(owner, role, None) if role is not None else None
    if isinstance(layer, Dropout):
        if abs(layer.rate - float(p)) > 1e-9:
            raise StochasticOpError(f"{_module_names.get(id(owner), type(owner).__name__)}.{role}: {op} was called "
                                    f"with p={p}, the layer drops with p={layer.rate}")
        return layer
    key = (id(owner), op, float(p))
    if key not in _own_streams:
        _own_streams[key] = Dropout(float(p), layer_idx=None)  # (training: the call decides)
        _own_streams[key].stream = f"{_module_names.get(id(owner), type(owner).__name__)}:{op}"
    return _own_streams[key]


def _dropped(layer, x, training):
    return layer.drop(x) if training and layer.rate > 0.0 else x


# ---- the dropout family -----------------------------------------------------------------------

def dropout(x, p=0.5, training=True, inplace=False, generator=None, addend=None):
    owner, frame = _caller()
    layer = _layer_for(owner, frame, "dropout", p)
    if layer is None:
        return _native("dropout")(x, p, training, inplace, generator, addend=addend)
    y = _dropped(layer, x, training)
    return y if addend is None else y + addend


def fused_bias_add_dropout(x, bias, p=0.5, axis=1, generator=None):
    owner, frame = _caller()
    layer = _layer_for(owner, frame, "fused_bias_add_dropout", p)
    if layer is None:
        return _native("fused_bias_add_dropout")(x, bias, p=p, axis=axis)
    return _dropped(layer, flow._C.bias_add(x, bias, axis=axis), owner.training)


def _masked_scores(x, mask, scale, fill_value):
    mask = mask.to(x.dtype)
    return x * mask * scale + fill_value * (1.0 - mask)


def fused_scale_mask_softmax_dropout(x, mask, fill_value=0.0, scale=1.0, p=0.5, generator=None):
    owner, frame = _caller()
    layer = _layer_for(owner, frame, "fused_scale_mask_softmax_dropout", p)
    if layer is None:
        return _native("fused_scale_mask_softmax_dropout")(x, mask, fill_value=fill_value, scale=scale, p=p)
    probabilities = flow.softmax(_masked_scores(x, mask, scale, fill_value), dim=-1)
    return _dropped(layer, probabilities, owner.training), probabilities


def fused_scale_tril_softmax_mask_scale(x, p=0.5, diagonal=0, tril_scale_value=1.0, tril_fill_value=0.0,
                                        generator=None):
    owner, frame = _caller()
    layer = _layer_for(owner, frame, "fused_scale_tril_softmax_mask_scale", p)
    if layer is None:
        return _native("fused_scale_tril_softmax_mask_scale")(
            x, p=p, diagonal=diagonal, tril_scale_value=tril_scale_value, tril_fill_value=tril_fill_value)
    lower = flow.tril(flow.ones_like(x), diagonal)
    probabilities = flow.softmax(_masked_scores(x, lower, tril_scale_value, tril_fill_value), dim=-1)
    return _dropped(layer, probabilities, owner.training), probabilities


DROPOUT_OPS = {"dropout": dropout, "fused_bias_add_dropout": fused_bias_add_dropout,
               "fused_scale_mask_softmax_dropout": fused_scale_mask_softmax_dropout,
               "fused_scale_tril_softmax_mask_scale": fused_scale_tril_softmax_mask_scale}


# ---- OneFlow's random factories inside a forward ----------------------------------------------------

def _refuse_in_forward(name, frame):
    """A check of ``random.oneflow_draws``: a draw from OneFlow inside the trained model's forward."""
    if in_model_forward(frame):
        _refuse_or_warn(f"oneflow {name}", _site(frame))


def _replace(namespace, name, replacement):
    original = getattr(namespace, name, None)
    if original is None:
        return
    _originals.setdefault((namespace, name), original)
    setattr(namespace, name, replacement)


def route_stochastic_ops():
    """Install the replacements (idempotent); ``unroute_stochastic_ops`` puts OneFlow's back."""
    oneflow_draws.watch_oneflow_draws()
    oneflow_draws.add_draw_check(_refuse_in_forward)
    if _originals:
        return
    native = {name: getattr(flow._C, name, None) for name in DROPOUT_OPS}
    for namespace in _NAMESPACES:
        for name, replacement in DROPOUT_OPS.items():
            if native[name] is not None and getattr(namespace, name, None) is native[name]:
                _replace(namespace, name, replacement)


def unroute_stochastic_ops():
    """OneFlow's dropout ops back; its random factories stay counted, no longer checked here."""
    for (namespace, name), original in _originals.items():
        setattr(namespace, name, original)
    _originals.clear()
    oneflow_draws.remove_draw_check(_refuse_in_forward)


def routed():
    return bool(_originals)
