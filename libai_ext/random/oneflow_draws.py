"""OneFlow's random ops, wrapped once under every name that reaches them: counted, and routed inside a forward.

``watch_oneflow_draws()`` (explicit, idempotent, process-wide; forked loader workers inherit it) wraps every op of
``oneflow_random_ops.INVENTORY`` (derived from OneFlow's registries by ``tools/dev/random_op_inventory.py``; another
OneFlow is refused): under ``oneflow._C.<name>`` and every name that is it, the ``Tensor`` methods implemented in C
that reach one, and every name a loaded module bound to one at import (``rebind_imported_names``).  Python code
that looks the names up when it runs meets the wrappers too; a reference taken before (a default argument, a
closure) is left to ``random.layers.stochastic_ops``'s check of the first forward.

A wrapper counts the draw (so ``finish_queued_draws`` knows whether any was made), tells each of ``listeners`` the
op's name (keyed augmentation's: at the call, with no wait for queued work), then calls OneFlow's own op, except
inside a model's forward or a graph's trace, where it hands the call to the router ``random.layers.stochastic_ops``
installs (``set_router``).
"""
import sys

import oneflow as flow

from ..compat import patching

PATCH = "random_op_routing"

forwards = []    # the watched forwards running now (``random.layers.stochastic_ops`` pushes and pops them)
_router = None
_lazy = flow._oneflow_internal.lazy_mode.is_enabled
_wrappers = {}   # id(OneFlow's own) -> its wrapper
_draws = 0
listeners = []  # callables given the op's name before a call (outside a forward) reaches OneFlow's own op
_EXEMPT_MODULES = ("libai_ext.",)  # libai_ext calls OneFlow's own ops where it means to


def inventory():
    """This OneFlow's random ops: ``oneflow_random_ops.INVENTORY``, made for the OneFlow pyproject.toml pins."""
    from . import oneflow_random_ops

    made_for = oneflow_random_ops.INVENTORY["oneflow"]
    if made_for != flow.__version__:
        raise RuntimeError(
            f"libai_ext's list of OneFlow's random ops was made for OneFlow {made_for}, this is OneFlow "
            f"{flow.__version__}: a random op the list does not name would draw unrouted. Install "
            f"oneflow=={made_for} (libai_ext's pin), or derive the list for this OneFlow with "
            "python tools/dev/random_op_inventory.py --write (from a checkout) and route or refuse what is new")
    return oneflow_random_ops.INVENTORY


def _wrapped(name, original):
    def draw(*args, **kwargs):
        global _draws
        _draws += 1
        if _router is not None and (forwards or _lazy()):
            return _router(name, original, args, kwargs)
        for listener in listeners:
            listener(name)
        return original(*args, **kwargs)
    draw.__name__ = draw.__qualname__ = name
    draw.__doc__, draw.__wrapped__ = original.__doc__, original
    return draw


def _install(owner, attribute, name):
    original = getattr(owner, attribute, None)
    if original is None:
        return
    inner = getattr(original, "__wrapped__", None)
    if inner is not None and _wrappers.get(id(inner)) is original:  # ours, from an earlier watch
        original = inner
    wrapper = _wrappers.get(id(original)) or _wrapped(name, original)
    _wrappers[id(original)] = wrapper
    if getattr(owner, attribute) is not wrapper:
        patching.replace(owner, attribute, wrapper, f"{name} counted and routed", patch=PATCH)


def _owner(qualified):
    module, _, attribute = qualified.rpartition(".")
    return sys.modules.get(module) or __import__(module, fromlist=["_"]), attribute


def watch_oneflow_draws():
    """Install the wrappers (once per process, until ``unwatch_oneflow_draws``), then rebind names imported
    before; every change goes through ``libai_ext.compat.patching`` (patch ``random_op_routing``)."""
    if watching():
        return
    ops = inventory()
    for name, entry in ops["functions"].items():
        _install(flow._C, name, name)
        for alias in entry["aliases"]:
            _install(*_owner(alias), name)
    for method, name in ops["tensor_methods"].items():
        _install(flow.Tensor, method, f"Tensor.{name}")
    rebind_imported_names()


def rebind_imported_names():
    """Point every name a loaded module bound to one of OneFlow's random ops at its wrapper; returns
    how many were rebound (libai_ext's own modules keep what they hold)."""
    by_id = {id(original): _wrappers[id(original)] for original in _originals_in_force()}
    rebound = 0
    for module_name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None)
        if namespace is None or module_name.startswith(_EXEMPT_MODULES) or module is flow._C:
            continue
        for key, value in list(namespace.items()):
            wrapper = by_id.get(id(value))
            if wrapper is not None and value is not wrapper:
                rebound += patching.replace(module, key, wrapper, f"{key} bound at import, rebound", patch=PATCH)
    return rebound


def _originals_in_force():
    return [change.original for change in patching.changes(PATCH)]


def unwatch_oneflow_draws():
    patching.undo_patch(PATCH)


def watching():
    return bool(patching.changes(PATCH))


def originals():
    """``{id(OneFlow's own): name}`` of every wrapped op (the first forward's check looks for them)."""
    return {id(change.original): change.name for change in patching.changes(PATCH)}


_draws_at_last_wait = -1


def finish_queued_draws(only_after_draws=False):
    """Wait for OneFlow's queued kernels: an eager op reads (and advances) its generator when it runs, not when
    it is queued, so a generator's state is read or replaced, or a stream re-seeded, only once everything queued
    has run.  ``only_after_draws``: not when no OneFlow draw was made since the last wait (known while the
    wrappers count them)."""
    global _draws_at_last_wait
    if only_after_draws and watching() and _draws == _draws_at_last_wait:
        return
    flow._oneflow_internal.eager.Sync()
    _draws_at_last_wait = _draws


def set_router(router):
    """``router(name, OneFlow's op, args, kwargs)`` answers the calls made inside a forward (None: none)."""
    global _router
    _router = router
