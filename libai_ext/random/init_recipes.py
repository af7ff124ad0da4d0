"""Record how each tensor got its initial values while a model is built ("recipes").

A recipe is one random draw (``normal(mean, std)`` or ``uniform(low, high)``, with the
arguments the model's code computed, e.g. a fan from the tensor's *global* shape) followed
by the in-place value ops applied since (``erfinv_``, ``mul_``, ``add_``, ``clamp_``, partial
``__setitem__``, ...) and the layout moves (``to_global``, ``to``).  ``param_init`` later
draws the same distribution from a counter-based stream and replays the ops.

Inside ``recording_init()`` OneFlow draws as usual; the recorder only watches:

* draws: ``flow.normal`` (``nn.init.normal_``, ``Tensor.normal_``, xavier/kaiming normal),
  ``flow._C.uniform_`` (``nn.init.uniform_``, ``Tensor.uniform_``, xavier/kaiming uniform,
  flowvision's ``trunc_normal_``), ``flow.randn``, ``flow.rand``;
* draws it cannot reproduce (``randint``, ``bernoulli``, ``orthogonal_``, ...): the tensor is
  marked, and ``param_init`` refuses a parameter that ends up with it;
* aliases: ``Parameter(t)``, ``t.data`` and ``p.data = t`` share one record ("storage"),
  because OneFlow makes a new Python object for each while the memory is the same;
* full overwrites (``fill_``, ``zero_``, ``t[...] = c``, ``copy_`` of an unrecorded tensor)
  make the values deterministic again, so the record is dropped.

Tensors are recognised by ``id``: the recorder keeps every tensor it saw alive until it is
closed, so an id is never reused meanwhile.  Each draw keeps a copy of the drawn values
(memory: one extra copy of every randomly initialised tensor, this rank's shards only, until
the recorder is dropped) so that ``param_init`` can check that replaying the recorded ops on
them gives the parameter's value exactly: any op the recorder missed shows up there.
"""
import contextlib
import numbers
import os
import sys

import oneflow as flow

LAYOUT_OPS = ("to_global", "to")
_VALUE_OPS = ("mul_", "div_", "add_", "sub_", "clamp_", "clip_", "clamp_min_", "clamp_max_", "erfinv_", "floor_",
              "sin_", "relu_", "triu_", "addcmul_", "addcdiv_", "masked_fill_", "scatter_", "scatter_add_", "index_add_")
_UNSUPPORTED_FACTORIES = ("randint", "randperm", "bernoulli", "randint_like", "randn_like", "multinomial")
_UNSUPPORTED_METHODS = ("exponential_", "bernoulli_", "orthogonal_")
# Frames inside these packages are not where a draw "comes from" in a message.
_LIBRARY_DIRS = tuple(os.path.dirname(m.__file__) + os.sep for m in (flow,)) + (os.path.dirname(__file__) + os.sep,)


def _call_site():
    frame = sys._getframe(2)
    while frame is not None and (frame.f_code.co_filename.startswith(_LIBRARY_DIRS)
                                 or "flowvision" in frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return "?"
    return f"{frame.f_code.co_filename}:{frame.f_lineno} ({frame.f_code.co_name})"


class Recipe:
    """One random draw and what happened to its values since."""

    def __init__(self, kind, args, shape, raw, site):
        self.kind = kind    # "normal" (mean, std) or "uniform" (low, high)
        self.args = args
        self.shape = shape  # the global shape at the draw (the fan came from it)
        self.raw = raw      # a copy of the drawn values, to check the replay
        self.site = site
        self.ops = []       # (method name, args, kwargs)

    def copy(self):
        other = Recipe(self.kind, self.args, self.shape, self.raw, self.site)
        other.ops = list(self.ops)
        return other

    def describe(self):
        args = ", ".join(f"{a:.6g}" for a in self.args)
        ops = "".join(f".{name}" for name, _, _ in self.ops)
        return f"{self.kind}({args}){ops}"


class Storage:
    """The record of one tensor's memory, shared by all its aliases."""

    def __init__(self):
        self.recipe = None
        self.unsupported = None  # why these values cannot be reproduced (with the call site)
        self.consumed = False    # its recipe moved on to another tensor (to_global, copy_)

    @property
    def random(self):
        return self.recipe is not None or self.unsupported is not None

    def clear(self):
        self.recipe, self.unsupported = None, None

    def take_from(self, other):
        """This memory now holds a copy of ``other``'s values."""
        self.recipe = other.recipe.copy() if other.recipe is not None else None
        self.unsupported = other.unsupported
        other.consumed = True


def _has_tensor(values):
    return any(isinstance(v, flow.Tensor) for v in values)


def _whole(key):
    return key is Ellipsis or (isinstance(key, slice) and key == slice(None))


def _covers_all(key):
    return all(_whole(k) for k in key) if isinstance(key, tuple) else _whole(key)


class InitRecorder:
    """What ``recording_init`` saw: the storage of every tensor, by ``id``."""

    def __init__(self):
        self._storages = {}
        self._alive = []  # keeps ids unique while recording
        self._busy = False

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

    # -- events ---------------------------------------------------------------------------

    def drew(self, tensor, kind, args):
        storage = self.storage(tensor)
        if not all(isinstance(a, numbers.Real) for a in args):
            storage.recipe, storage.unsupported = None, f"{kind} draw with tensor arguments at {_call_site()}"
            return
        with flow.no_grad():
            raw = tensor.clone()
        storage.recipe = Recipe(kind, tuple(float(a) for a in args), tuple(tensor.shape), raw, _call_site())
        storage.unsupported = None

    def drew_unsupported(self, tensor, what):
        storage = self.storage(tensor)
        storage.recipe, storage.unsupported = None, f"{what} at {_call_site()}"

    def value_op(self, tensor, name, args, kwargs):
        storage = self.lookup(tensor)
        if storage is None or storage.recipe is None:
            return
        if _has_tensor(args) or _has_tensor(kwargs.values()):
            storage.recipe, storage.unsupported = None, f"{name} with a tensor argument at {_call_site()}"
        else:
            storage.recipe.ops.append((name, args, kwargs))

    def overwrote(self, tensor, source=None):
        """``tensor``'s values were all replaced: by ``source``'s, or by constants."""
        storage = self.lookup(tensor)
        source_storage = self.lookup(source) if isinstance(source, flow.Tensor) else None
        if source_storage is not None and source_storage.random:
            storage = storage or self.storage(tensor)
            if tuple(source.shape) != tuple(tensor.shape):
                storage.recipe, storage.unsupported = None, f"filled from a random {tuple(source.shape)} tensor " \
                                                             f"at {_call_site()}"
                source_storage.consumed = True
            else:
                storage.take_from(source_storage)
        elif storage is not None:
            storage.clear()

    def set_items(self, tensor, key, value):
        if _covers_all(key):
            return self.overwrote(tensor, value)
        storage = self.lookup(tensor)
        value_storage = self.lookup(value) if isinstance(value, flow.Tensor) else None
        if value_storage is not None and value_storage.random:
            storage = storage or self.storage(tensor)
            storage.recipe, storage.unsupported = None, f"indexed assignment of random values at {_call_site()}"
            value_storage.consumed = True
        elif storage is not None and storage.recipe is not None:
            self.value_op(tensor, "__setitem__", (key, value), {})

    def moved(self, source, result, name, args, kwargs):
        """``result = source.to_global(...)`` (or ``.to``): the same values, another layout."""
        storage = self.lookup(source)
        if result is source or storage is None or not storage.random:
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


def _guarded(recorder, original, after):
    """``original`` that tells ``after(result, *args, **kwargs)`` unless the recorder is busy
    (calls nested inside another watched call, or the recorder's own ops, are not events)."""
    def wrapper(*args, **kwargs):
        if recorder._busy:
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


def _patches(recorder):
    """(owner, attribute, replacement) for everything the recorder watches."""
    T = flow.Tensor
    data = T.__dict__["data"]
    param_init = flow.nn.Parameter.__init__
    patches = [
        (flow._C, "uniform_", _guarded(recorder, flow._C.uniform_,
                                       lambda r, t, a=0.0, b=1.0, *_, **__: recorder.drew(t, "uniform", (a, b)))),
        (T, "fill_", _guarded(recorder, T.fill_, lambda r, t, value: recorder.overwrote(t, value))),
        (T, "zero_", _guarded(recorder, T.zero_, lambda r, t: recorder.overwrote(t))),
        (T, "copy_", _guarded(recorder, T.copy_, lambda r, t, other: recorder.overwrote(t, other))),
        (T, "__setitem__", _guarded(recorder, T.__setitem__, lambda r, t, key, value: recorder.set_items(t, key, value))),
        (T, "data", property(
            _guarded(recorder, data.__get__, lambda r, t, *_: recorder.bind(r, recorder.storage(t))),
            _guarded(recorder, data.__set__, lambda r, t, value: recorder.bind(t, recorder.storage(value))))),
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

    Not thread-safe: the patches are process-wide while the body runs.
    """
    recorder = InitRecorder()
    patches = _patches(recorder)
    originals = [(owner, name, owner.__dict__[name] if name in owner.__dict__ else getattr(owner, name))
                 for owner, name, _ in patches]
    try:
        for owner, name, replacement in patches:
            setattr(owner, name, replacement)
        yield recorder
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)
