"""Every random op of OneFlow inside a model's forward, drawn from ``libai_ext``'s streams or refused by name.

``route_stochastic_ops()`` (the trainer calls it once per process; explicit, idempotent) hands the calls
``random.oneflow_draws`` wraps (every op of the random-op inventory, under every name that reaches it) to ``route``
while a watched model's forward runs (``watch_model``) or a graph is traced; anywhere else OneFlow's own ops run.
A call belongs to the nearest watched module whose ``forward`` is on the stack and to its call site (the first frame
outside OneFlow's own Python).  The dropout family draws from the ``Dropout`` of the op's role (``conversion.ROLES``)
or one per (call site, rate), named ``<module>:<op>@<file>:<line>(<function>)/p=<p>``; the other ops draw per call
site by global position (``random_ops``); ``random.audit.REFUSED`` ops are refused under ``"layout_invariant"`` and
warned about once per call site under ``"fast"`` (each op: docs/randomness.md).

A module of no watched model drawing inside a watched forward is refused the same way.  Two watched models with the
same qualified names would draw the same masks: the second is watched with a ``place`` that prefixes its streams (the
trainer's model keeps plain names), and both running unprefixed in one training step is refused.
"""
import logging
import os
import sys
import weakref

import oneflow as flow
from oneflow import nn
from oneflow.nn.graph.proxy import ProxyModule

from ...compat import patching
from .. import draws, forward_draws, modes, oneflow_draws
from . import graph_calls, random_ops
from .conversion import roles_of
from .stochastic import Dropout, DropPath

logger = logging.getLogger(__name__)

_names = weakref.WeakKeyDictionary()    # module of a watched model -> its stream name ("model" for a root)
_roots = []                             # weakrefs to watched roots, in the order they were watched
_prefixes = weakref.WeakKeyDictionary()  # root -> the prefix of its streams ("" for the trainer's)
_entered = {}                           # prefix -> (step token, weakref to the root that ran in that step)
_streams = weakref.WeakKeyDictionary()  # module -> {key of a call site's stream: Dropout or _Stream}
_warned_sites = set()
_ONEFLOW_DIR = os.path.dirname(flow.__file__) + os.sep
_ROUTING_FILES = {os.path.abspath(m.__file__).rstrip("c") for m in (oneflow_draws, random_ops)} | \
    {os.path.abspath(__file__).rstrip("c")}
_internal_files = {}
_LIBAI_EXT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_STACK_LIMIT = 256


class StochasticOpError(RuntimeError):
    """A random op inside a model's forward that libai_ext cannot key by global position."""


# ---- which model, which module, which line -----------------------------------------------------

def _module_of(frame):
    owner = frame.f_locals.get("self")
    if isinstance(owner, ProxyModule):
        owner = owner.to(nn.Module)
    return owner if isinstance(owner, nn.Module) else None


def _internal(code):
    """Frames of OneFlow's Python and of this routing: a call site is the first frame outside them."""
    name = code.co_filename
    found = _internal_files.get(name)
    if found is None:
        path = os.path.abspath(name)
        found = _internal_files[name] = path.startswith(_ONEFLOW_DIR) or path in _ROUTING_FILES
    return found


def _locate(frame):
    """``(watched module, call-site frame, unwatched module drawing inside it or None)``, or None when no
    watched module's forward is on the stack."""
    site = stray = None
    for _ in range(_STACK_LIMIT):
        if frame is None:
            return None
        code = frame.f_code
        if site is None and not _internal(code):
            site = frame
        if code.co_name == "forward":
            module = _module_of(frame)
            if module is not None:
                if module in _names:
                    return module, site or _first_outside(frame), stray
                stray = stray or module
        frame = frame.f_back
    return None


def _first_outside(frame):
    """The first frame from ``frame`` up that is not OneFlow's (the line that called a OneFlow module)."""
    start = frame
    for _ in range(_STACK_LIMIT):
        if frame is None:
            return start
        if not _internal(frame.f_code):
            return frame
        frame = frame.f_back
    return start


class Call:
    """One call of a random op inside a watched forward: its module, call site and streams."""

    def __init__(self, op, owner, site, stray):
        self.op, self.owner, self.stray = op, owner, stray
        self.owner_name = _names[owner]
        code = site.f_code
        self.where = f"{code.co_filename}:{site.f_lineno} ({code.co_name})"
        self._site = f"{os.path.basename(code.co_filename)}:{site.f_lineno}({code.co_name})"
        self._site_key = (code.co_filename, site.f_lineno)

    @property
    def fast(self):
        """``"fast"`` eagerly; a graph draws the counter values in both modes (OneFlow 0.9.0's graph ignores
        the generator a kernel is given, as ``random.layers.stochastic`` measured for dropout)."""
        return modes.randomness() == "fast" and not oneflow_draws._lazy()

    def refuse(self, what):
        """Refuse (layout_invariant) or warn once per call site (fast, then returns)."""
        message = (f"{what} at {self.where}, in the forward of {self.owner_name} "
                   f"({type(self.owner).__name__}): libai_ext cannot key it by global position, so training "
                   "would depend on the parallel layout")
        if modes.randomness() != "fast":
            raise StochasticOpError(message + " (train.randomness='layout_invariant'; see docs/randomness.md "
                                    "for what each op does, or use train.randomness='fast')")
        if self.where not in _warned_sites:
            _warned_sites.add(self.where)
            logger.warning(message + " (train.randomness='fast': OneFlow's generator draws it)")

    def _own(self, key, make):
        streams = _streams.setdefault(self.owner, {})
        if key not in streams:
            streams[key] = make()
        return streams[key]

    def layer(self, p, op=None):
        """The ``Dropout`` drawing a dropout-family op at rate ``p``: the module's layer of the op's role,
        else its own per (call site, rate)."""
        op = op or self.op
        role = roles_of(self.owner).get(op)
        layer = getattr(self.owner, role, None) if role is not None else None
        if isinstance(layer, Dropout):
            if abs(layer.rate - float(p)) > 1e-9:
                raise StochasticOpError(f"{self.owner_name}.{role}: {op} was called with p={p}, the layer drops "
                                        f"with p={layer.rate}")
            return layer

        def make():
            own = Dropout(float(p), layer_idx=None)  # (training: the call decides)
            own.stream = f"{self.owner_name}:{op}@{self._site}/p={float(p)!r}"
            return own
        return self._own((op, self._site_key, float(p)), make)

    def draw(self, layout, part=""):
        """This call's ``forward_draws.Draw`` from the stream of its call site (``part``: one of several
        draws the op makes)."""
        return self.named_draw(f"{self.owner_name}:{self.op}{part}@{self._site}", layout)

    def named_draw(self, name, layout):
        """The next draw of the stream ``name`` at this call site."""
        return self._own((name, self._site_key), lambda: _Stream(name)).next_draw(layout)


class _Stream:
    """The draws of one call site (its name keys them; ``draws.CallCounter`` numbers them)."""

    def __init__(self, name):
        self.stream = name
        self.counter = draws.CallCounter()

    def next_draw(self, layout):
        if oneflow_draws._lazy():
            step_info, call = graph_calls.traced_draw(self, layout)  # (raises in a graph given no step)
            outer = draws.current_step()
            if outer is not None:  # the trainer's step: where the batch's rows are
                step_info.batch_rows, step_info.data_parallel_rank = outer.batch_rows, outer.data_parallel_rank
            return forward_draws.Draw(self.stream, step_info.step, call, step_info, lazy=True)
        step, call, info = self.counter.next()
        return forward_draws.Draw(self.stream, step, call, info)


# ---- the router ------------------------------------------------------------------------------------

def route(name, original, args, kwargs):
    """What a wrapped random op does inside a forward (``oneflow_draws`` calls it)."""
    located = _locate(sys._getframe(2))
    if located is None:
        if not oneflow_draws._lazy():
            del oneflow_draws.forwards[:]  # entries a forward that raised left behind
        return original(*args, **kwargs)
    op = name[len("Tensor."):] if name.startswith("Tensor.") else name
    call = Call(op, *located)
    if call.stray is not None:
        call.refuse(f"oneflow {op} called by {type(call.stray).__name__}, a module of no watched model "
                    "(libai_ext.watch_model(that_model, place=...) keys it)")
        return original(*args, **kwargs)
    handler = random_ops.HANDLERS.get(op)
    if handler is None:
        call.refuse(f"oneflow {op} ({random_ops.REFUSED.get(op, 'not in the random-op inventory')})")
        return original(*args, **kwargs)
    try:
        return handler(call, original, args, kwargs)
    except forward_draws.LayoutDependentDraw as error:
        call.refuse(f"oneflow {op}: {error}")
    except random_ops.ArgumentsNotRead as error:
        result = original(*args, **kwargs)  # OneFlow's own error where the call is wrong
        call.refuse(f"oneflow {op} with arguments libai_ext cannot read ({error})")
        return result
    return original(*args, **kwargs)


def route_stochastic_ops():
    """Route the calls inside watched forwards (idempotent); ``unroute_stochastic_ops`` stops it."""
    oneflow_draws.watch_oneflow_draws()
    oneflow_draws.set_router(route)


def unroute_stochastic_ops():
    """OneFlow's own ops everywhere again (the wrappers stay, counting)."""
    oneflow_draws.set_router(None)


# ---- watched models -----------------------------------------------------------------------------

def _enter(model, inputs):
    _check_one_model_per_prefix(model)
    oneflow_draws.forwards.append(model)
    if _spotting is not None and _spotting[0]() is model:  # its first forward raised: that check ends
        _stop_spotting(report=False)
    if model not in _checked and _spotting is None and draws.current_step() is not None:
        _checked.add(model)  # its first training forward: look for OneFlow's own random ops
        _start_spotting(model)


def _leave(model, inputs, output):
    if oneflow_draws.forwards:
        oneflow_draws.forwards.pop()
    if _spotting is not None and _spotting[0]() is model:
        _stop_spotting()


# ---- the first forward: OneFlow's own random ops reached around the wrappers ------------------------

_checked = weakref.WeakSet()
_spotting = None  # (weakref to the root, the profile function it replaced, findings)


def _start_spotting(model):
    """Watch every C call of this forward (``sys.setprofile``, this thread): a reference to one of OneFlow's
    random ops taken before the wrappers were installed (a default argument, a closure, an attribute)
    calls it directly, and is refused by name when the forward ends."""
    global _spotting
    natives = oneflow_draws.originals()
    methods = set(oneflow_draws.inventory()["tensor_methods"])
    findings = []

    def spot(frame, event, arg):
        if event != "c_call":
            return
        name = natives.get(id(arg))
        if name is None and getattr(arg, "__name__", None) in methods and isinstance(getattr(arg, "__self__", None),
                                                                                     flow.Tensor):
            name = f"Tensor.{arg.__name__}"
        if name is not None and not os.path.abspath(frame.f_code.co_filename).startswith(_LIBAI_EXT_DIR):
            findings.append(f"oneflow {name} at {frame.f_code.co_filename}:{frame.f_lineno} ({frame.f_code.co_name})")
    _spotting = (weakref.ref(model), sys.getprofile(), findings)
    sys.setprofile(spot)
    patching.process_change("first_forward_check", "sys.setprofile", lambda: _spotting and _stop_spotting(False))


def _stop_spotting(report=True):
    global _spotting
    model, previous, findings = _spotting
    _spotting = None
    sys.setprofile(previous)
    patching.released("sys.setprofile")
    if not findings or not report:
        return
    message = (f"the forward of {type(model()).__name__} called OneFlow's own random ops through references "
               f"taken before libai_ext routed them: {'; '.join(sorted(set(findings)))}. They draw from OneFlow's "
               "generators, per rank and layout: call them by name (oneflow.rand, x.bernoulli(), ...)")
    if modes.randomness() == "fast":
        logger.warning(message + " (train.randomness='fast')")
        return
    raise StochasticOpError(message + " (train.randomness='layout_invariant')")


def _check_one_model_per_prefix(model):
    """Two watched models whose streams carry the same names (both unprefixed: built apart from one config,
    a teacher and its student) would draw the same masks: refused when both run in one training step."""
    step = draws.current_step()
    if step is None:
        return
    prefix = _prefixes.get(model, "")
    seen = _entered.get(prefix)
    other = seen[1]() if seen is not None and seen[0] == step.token else None
    if other is not None and other is not model:
        raise StochasticOpError(
            f"{type(model).__name__} and {type(other).__name__} both run in this training step with streams of the "
            f"same names (prefix {prefix!r}): their dropout masks and draws would be the same. Watch the second "
            "with libai_ext.watch_model(model, place='teacher') (any name of its place)")
    _entered[prefix] = (step.token, weakref.ref(model))


def watch_model(model, place=None):
    """Treat ``model``'s forward as training's: its modules' random ops are routed (``route``), its
    stochastic layers and call sites keyed by their qualified names, prefixed by ``place/`` when given
    (a second model with the same names: a teacher, a discriminator; the trainer's model has none).
    Returns the prefix."""
    prefix = f"{place}/" if place else ""
    _prefixes[model] = prefix
    for name, module in model.named_modules():
        _names[module] = prefix + (name or "model")
    for name, module in model.named_modules() if prefix else ():
        if isinstance(module, (Dropout, DropPath)):
            module.stream = prefix + name
    if not any(ref() is model for ref in _roots):
        _roots.append(weakref.ref(model))
        model.register_forward_pre_hook(_enter)
        model.register_forward_hook(_leave)
    if oneflow_draws.watching():
        oneflow_draws.rebind_imported_names()
    return prefix
