"""Record how each tensor got its initial values while a model is built ("recipes").

A recipe is a root, one random draw (``normal(mean, std)`` or ``uniform(low, high)`` with the arguments the model's
code computed, e.g. a fan from the *global* shape) or an exact op on other recipes (``Derived``, ``init_derivations``),
plus the in-place value ops and layout moves applied since; ``param_init`` draws the same distributions from a
counter-based stream and replays the rest. Inside ``recording_init()`` OneFlow computes as usual; the recorder watches
the draws, ops, copies and aliases docs/init.md lists. Draws it cannot reproduce (``randint``, ``orthogonal_``, ...)
and non-exact derivations mark the tensor, refused by ``param_init`` where it reaches a parameter. Full overwrites
(``fill_``, ``zero_``, ``t[...] = c``, ``copy_`` of an unrecorded tensor) drop the record. Aliases (``Parameter(t)``,
``t.data``, ``t.detach()``, ``p.data = t``) share one ``Storage``: OneFlow makes a new Python object for each.

Tensors are recognised by ``id``: the recorder keeps every tensor it saw alive until released, so no id is reused.
Each draw keeps a copy of its values (one extra copy of every random tensor's shards on this rank, until released) so
that ``param_init`` can check that replaying the recipe gives the parameter's value exactly: a missed op shows there.
"""
import contextlib
import copy
import numbers
import os
import sys
import threading

import oneflow as flow

from ..compat import patching
from .init_derivations import (
    EXACT_FUNCTIONS, EXACT_METHODS, INPLACE_OPERATORS, REFUSED_FUNCTIONS, REFUSED_METHODS, Derived, capture,
    tensors_in,
)

LAYOUT_OPS = ("to_global", "to")
_VALUE_OPS = ("mul_", "div_", "add_", "sub_", "clamp_", "clip_", "clamp_min_", "clamp_max_", "erfinv_", "floor_",
              "sin_", "relu_", "triu_", "addcmul_", "addcdiv_", "masked_fill_", "scatter_", "scatter_add_", "index_add_")
_UNSUPPORTED_FACTORIES = ("randint", "randperm", "bernoulli", "randint_like", "randn_like", "multinomial")
_UNSUPPORTED_METHODS = ("exponential_", "bernoulli_", "orthogonal_")
# Frames inside these packages (and the copy module) are not where a draw "comes from" in a message.
_LIBRARY_DIRS = (os.path.dirname(flow.__file__) + os.sep, os.path.dirname(__file__) + os.sep, copy.__file__)


def _call_site():
    frame = sys._getframe(2)
    while frame is not None and (frame.f_code.co_filename.startswith(_LIBRARY_DIRS)
                                 or "flowvision" in frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return "?"
    return f"{frame.f_code.co_filename}:{frame.f_lineno} ({frame.f_code.co_name})"


class Draw:
    """One random draw: the distribution the model's code asked for, and the values it got."""

    def __init__(self, kind, args, shape, raw, site):
        self.kind = kind    # "normal" (mean, std) or "uniform" (low, high)
        self.args = args
        self.shape = shape  # the global shape at the draw (the fan came from it)
        self.raw = raw      # a copy of the drawn values, to check the replay
        self.site = site

    def describe(self):
        return f"{self.kind}({', '.join(f'{a:.6g}' for a in self.args)})"


class Recipe:
    """One tensor's values: a root (a ``Draw`` or a ``Derived`` op) and the ops applied since."""

    def __init__(self, root, shape, site):
        self.root = root
        self.shape = shape  # the global shape of the root's values
        self.site = site
        self.ops = []       # (method name, args, kwargs)
        self.copied = False  # came to this tensor by a copy (not by the draw, an alias or a move)

    @property
    def drawn(self):
        """Its root is a draw of its own (not an op on other recipes)."""
        return isinstance(self.root, Draw)

    def copy(self):
        other = Recipe(self.root, self.shape, self.site)
        other.ops, other.copied = list(self.ops), self.copied
        return other

    def draws(self):
        """The draws its values come from, in a fixed order (repeats included)."""
        if self.drawn:
            return [self.root]
        return [draw for recipe in self.root.inputs() for draw in recipe.draws()]

    def describe(self):
        return self.root.describe() + "".join(f".{name}" for name, _, _ in self.ops)


class Storage:
    """The record of one tensor's memory, shared by all its aliases."""

    def __init__(self):
        self.recipe = None
        self.unsupported = None  # why these values cannot be reproduced (with the call site)
        self.consumed = False    # its values went on into another recorded tensor
        self.derived = False     # its values were computed from other recorded tensors

    @property
    def random(self):
        return self.recipe is not None or self.unsupported is not None

    def clear(self):
        self.recipe, self.unsupported, self.derived = None, None, False

    def take_from(self, other, consume=True):
        """This memory takes a copy of ``other``'s values (which, ``consume``d, moved on)."""
        self.recipe = other.recipe.copy() if other.recipe is not None else None
        self.unsupported, self.derived = other.unsupported, other.derived
        other.consumed = other.consumed or consume


def _has_tensor(values):
    return any(isinstance(v, flow.Tensor) for v in values)


def _whole(key):
    return key is Ellipsis or (isinstance(key, slice) and key == slice(None))


def _covers_all(key):
    return all(_whole(k) for k in key) if isinstance(key, tuple) else _whole(key)


def _outputs(result):
    """(index or None, tensor) for a result that is a tensor or a list/tuple of tensors."""
    if isinstance(result, flow.Tensor):
        return [(None, result)]
    if isinstance(result, (list, tuple)):
        return [(i, r) for i, r in enumerate(result) if isinstance(r, flow.Tensor)]
    return []


class InitRecorder:
    """What ``recording_init`` saw: the storage of every tensor, by ``id``."""

    def __init__(self):
        self._storages = {}
        self._alive = []  # keeps ids unique while recording
        self._busy = False
        self._thread = threading.get_ident()  # the building thread: other threads' ops are no events

    def lookup(self, tensor):
        return self._storages.get(id(tensor))

    def storage(self, tensor):
        found = self._storages.get(id(tensor))
        if found is None:
            found = self._storages[id(tensor)] = Storage()
            self._alive.append(tensor)
        return found

    def bind(self, tensor, storage):
        if id(tensor) not in self._storages:
            self._alive.append(tensor)
        self._storages[id(tensor)] = storage

    def storages(self):
        return {id(s): s for s in self._storages.values()}.values()

    def release(self):
        """Drop every tensor and record (the drawn copies with them)."""
        self._storages, self._alive = {}, []

    def _random(self, tensor):
        storage = self.lookup(tensor)
        return storage if storage is not None and storage.random else None

    # -- events ---------------------------------------------------------------------------

    def drew(self, tensor, kind, args):
        storage = self.storage(tensor)
        storage.derived, storage.consumed = False, False  # new values, gone nowhere yet
        if not all(isinstance(a, numbers.Real) for a in args):
            storage.recipe, storage.unsupported = None, f"{kind} draw with tensor arguments at {_call_site()}"
            return
        with flow.no_grad():
            raw = tensor.clone()
        site = _call_site()
        shape = tuple(tensor.shape)
        storage.recipe = Recipe(Draw(kind, tuple(float(a) for a in args), shape, raw, site), shape, site)
        storage.unsupported = None

    def drew_unsupported(self, tensor, what):
        storage = self.storage(tensor)
        storage.recipe, storage.unsupported = None, f"{what} at {_call_site()}"
        storage.derived, storage.consumed = False, False

    def value_op(self, tensor, name, args, kwargs):
        random_args = [s for s in map(self._random, tensors_in(tuple(args) + tuple(kwargs.values()))) if s]
        storage = self.lookup(tensor)
        if random_args:
            storage = storage or self.storage(tensor)
            storage.recipe, storage.unsupported = None, f"in-place {name} with a random tensor argument at " \
                                                        f"{_call_site()}"
            for source in random_args:
                source.consumed = True
        elif storage is None or storage.recipe is None:
            return
        elif _has_tensor(args) or _has_tensor(kwargs.values()):
            storage.recipe, storage.unsupported = None, f"{name} with a tensor argument at {_call_site()}"
        else:
            storage.recipe.ops.append((name, args, kwargs))

    def overwrote(self, tensor, source=None):
        """``tensor``'s values were all replaced: by ``source``'s, or by constants."""
        storage = self.lookup(tensor)
        source_storage = self._random(source) if isinstance(source, flow.Tensor) else None
        if source_storage is not None:
            storage = storage or self.storage(tensor)
            if tuple(source.shape) != tuple(tensor.shape):
                storage.recipe, storage.unsupported = None, f"filled from a random {tuple(source.shape)} tensor " \
                                                             f"at {_call_site()}"
                source_storage.consumed = True
            else:
                storage.take_from(source_storage)
                if storage.recipe is not None:
                    storage.recipe.copied = True
        elif storage is not None:
            storage.clear()

    def set_items(self, tensor, key, value):
        if _covers_all(key):
            return self.overwrote(tensor, value)
        storage = self.lookup(tensor)
        value_storage = self._random(value) if isinstance(value, flow.Tensor) else None
        if value_storage is not None:
            storage = storage or self.storage(tensor)
            storage.recipe, storage.unsupported = None, f"indexed assignment of random values at {_call_site()}"
            value_storage.consumed = True
        elif storage is not None and storage.recipe is not None:
            self.value_op(tensor, "__setitem__", (key, value), {})

    def moved(self, source, result, name, args, kwargs):
        """``result = source.to_global(...)`` (or ``.to``): the same values, another layout."""
        storage = self._random(source)
        if result is source or storage is None:
            return
        moved = Storage()
        moved.take_from(storage)
        if moved.recipe is not None:
            moved.recipe.ops.append((name, args, kwargs))
            if tuple(result.shape) != moved.recipe.shape:
                moved.recipe, moved.unsupported = None, (
                    f"drawn per shard with shape {moved.recipe.shape} (global shape {tuple(result.shape)}), "
                    f"at {moved.recipe.site}")
        self.bind(result, moved)

    def copied(self, source, result):
        """``result`` is a new tensor holding ``source``'s values (``clone``, ``copy.deepcopy``)."""
        storage = self._random(source)
        if storage is None or result is source or not isinstance(result, flow.Tensor):
            return
        copy_of = Storage()
        copy_of.take_from(storage, consume=False)  # both hold the values: the source stays one
        if copy_of.recipe is not None:
            copy_of.recipe.copied = True
        self.bind(result, copy_of)

    def aliased(self, source, result):
        """``result`` is another Python object for ``source``'s memory (``detach``, ``.data``)."""
        if isinstance(result, flow.Tensor) and result is not source and self.lookup(source) is not None:
            self.bind(result, self.lookup(source))

    def derived(self, result, name, fn, args, kwargs, exact):
        """``result = fn(*args, **kwargs)``, an out-of-place op that may read random tensors."""
        sources = [t for t in tensors_in(tuple(args) + tuple(kwargs.values())) if self._random(t)]
        if not sources:
            return
        for source in sources:
            self.lookup(source).consumed = True
        site = _call_site()
        unsupported = next((s.unsupported for s in map(self.lookup, sources) if s.unsupported), None)
        if unsupported is not None:
            reason = f"{name} at {site} of a value that cannot be reproduced: {unsupported}"
        elif not exact:
            reason = f"{name} of a random tensor at {site}, an op that is not replayed (its result may differ " \
                     f"between layouts)"
        else:
            reason = None

            def recipe_of(tensor):
                storage = self.lookup(tensor)
                return storage.recipe if storage is not None else None
            args, kwargs = capture(tuple(args), recipe_of), {k: capture(v, recipe_of) for k, v in kwargs.items()}
        for index, output in _outputs(result):
            if any(output is source for source in sources):
                continue  # the op handed its input back (``contiguous()``)
            storage = Storage()
            storage.derived = True
            if reason is not None:
                storage.unsupported = reason
            else:
                storage.recipe = Recipe(Derived(name, fn, args, kwargs, index, site), tuple(output.shape), site)
            self.bind(output, storage)


def _guarded(recorder, original, after):
    """``original`` that tells ``after(result, *args, **kwargs)`` unless the recorder is busy
    (calls nested inside another watched call, or the recorder's own ops, are not events) or the
    call comes from another thread (e.g. a data loader's)."""
    def wrapper(*args, **kwargs):
        if recorder._busy or threading.get_ident() != recorder._thread:
            return original(*args, **kwargs)
        recorder._busy = True
        try:
            result = original(*args, **kwargs)
            after(result, *args, **kwargs)
            return result
        finally:
            recorder._busy = False
    return wrapper


def _normal_event(recorder):
    def after(result, mean=0.0, std=1.0, *args, out=None, **kwargs):
        recorder.drew(out if out is not None else result, "normal", (mean, std))
    return after


def _deepcopy_tensor(tensor, memo):
    """What ``copy.deepcopy`` does for a tensor without a ``__deepcopy__`` of its own."""
    return copy._reconstruct(tensor, memo, *tensor.__reduce_ex__(4))


def _derivation_patches(recorder):
    """Every out-of-place op of ``init_derivations``' lists, on ``flow.Tensor`` and ``flow`` / ``flow._C``."""
    T = flow.Tensor

    def watch(owner, name, exact, label):
        original = getattr(owner, name)
        return owner, name, _guarded(recorder, original, lambda r, *a, **k: recorder.derived(
            r, label, original, a, k, exact))

    patches = [watch(T, name, exact, f"Tensor.{name}") for names, exact in ((EXACT_METHODS, True),
                                                                            (REFUSED_METHODS, False))
               for name in names if hasattr(T, name)]
    transpose = T.__dict__["T"].fget
    patches.append((T, "T", property(_guarded(recorder, transpose, lambda r, t: recorder.derived(
        r, "Tensor.T", transpose, (t,), {}, True)))))
    for owner, prefix in ((flow, "flow"), (flow._C, "flow._C")):
        patches += [watch(owner, name, exact, f"{prefix}.{name}") for names, exact in ((EXACT_FUNCTIONS, True),
                                                                                       (REFUSED_FUNCTIONS, False))
                    for name in names if callable(getattr(owner, name, None))]
    return patches


def _patches(recorder):
    """(owner, attribute, replacement) for everything the recorder watches."""
    T = flow.Tensor
    data = T.__dict__["data"]
    param_init = flow.nn.Parameter.__init__
    patches = _derivation_patches(recorder) + [
        (flow._C, "uniform_", _guarded(recorder, flow._C.uniform_,
                                       lambda r, t, a=0.0, b=1.0, *_, **__: recorder.drew(t, "uniform", (a, b)))),
        (T, "fill_", _guarded(recorder, T.fill_, lambda r, t, value: recorder.overwrote(t, value))),
        (T, "zero_", _guarded(recorder, T.zero_, lambda r, t: recorder.overwrote(t))),
        (T, "copy_", _guarded(recorder, T.copy_, lambda r, t, other: recorder.overwrote(t, other))),
        (T, "__setitem__", _guarded(recorder, T.__setitem__, lambda r, t, key, value: recorder.set_items(t, key, value))),
        (T, "data", property(
            _guarded(recorder, data.__get__, lambda r, t, *_: recorder.bind(r, recorder.storage(t))),
            _guarded(recorder, data.__set__, lambda r, t, value: recorder.bind(t, recorder.storage(value))))),
        (T, "detach", _guarded(recorder, T.detach, lambda r, t: recorder.aliased(t, r))),
        (T, "clone", _guarded(recorder, T.clone, lambda r, t, *a, **k: recorder.copied(t, r))),
        (T, "__deepcopy__", _guarded(recorder, _deepcopy_tensor, lambda r, t, memo: recorder.copied(t, r))),
        (flow.nn.Parameter, "__init__", _guarded(
            recorder, param_init, lambda r, p, data=None, *a, **k: data is not None and recorder.bind(
                p, recorder.storage(data)))),
    ]
    # flow.<name> and flow._C.<name> are one function in 0.9.0: both names are watched.
    for owner in (flow, flow._C):
        patches += [
            (owner, "normal", _guarded(recorder, owner.normal, _normal_event(recorder))),
            (owner, "randn", _guarded(recorder, owner.randn,
                                      lambda r, *a, **k: recorder.drew(r, "normal", (0.0, 1.0)))),
            (owner, "rand", _guarded(recorder, owner.rand,
                                     lambda r, *a, **k: recorder.drew(r, "uniform", (0.0, 1.0)))),
        ]
        patches += [(owner, name, _guarded(recorder, getattr(owner, name),
                                           lambda r, *a, _name=name, **k: recorder.drew_unsupported(r, _name)))
                    for name in _UNSUPPORTED_FACTORIES if hasattr(owner, name)]
    for name in _VALUE_OPS:
        patches.append((T, name, _guarded(recorder, getattr(T, name),
                                          lambda r, t, *a, _name=name, **k: recorder.value_op(t, _name, a, k))))
    for name, inplace in INPLACE_OPERATORS.items():
        patches.append((T, name, _guarded(recorder, getattr(T, name),
                                          lambda r, t, *a, _name=inplace, **k: recorder.value_op(t, _name, a, k))))
    for name in LAYOUT_OPS:
        patches.append((T, name, _guarded(recorder, getattr(T, name),
                                          lambda r, t, *a, _name=name, **k: recorder.moved(t, r, _name, a, k))))
    for name in _UNSUPPORTED_METHODS:
        patches.append((T, name, _guarded(recorder, getattr(T, name),
                                          lambda r, t, *a, _name=name, **k: recorder.drew_unsupported(t, _name))))
    return patches


@contextlib.contextmanager
def recording_init():
    """Watch OneFlow's random init while the body builds a model; yields the ``InitRecorder``.

    The patches are process-wide while the body runs, but only the calling thread's ops are
    recorded: build the model on the thread that opened the recorder.
    """
    recorder = InitRecorder()
    with patching.temporarily(_patches(recorder), "init_recording"):
        yield recorder
