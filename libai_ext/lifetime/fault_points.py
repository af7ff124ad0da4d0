"""Named points of a checkpoint save and of a training step where an installed hook may act (standard library only).

The runtime calls ``fault_point(phase, checkpoint)`` at each phase of a save (``CommittedCheckpointer``) and of a
step (``lifetime.preemption``), and wraps LiBai's writing of the weights in ``weights_being_written``.  Both do
nothing until the tests ``install(hook)`` (``libai_ext.testing.fault_injection``), which the runtime never imports.
"""
import contextlib

_hook = None


def install(hook):
    """``hook.fault_point(phase, checkpoint)`` and ``hook.weights_being_written(checkpoint)`` from now on
    (None: no hook)."""
    global _hook
    _hook = hook


def fault_point(phase, checkpoint):
    if _hook is not None:
        _hook.fault_point(phase, checkpoint)


def weights_being_written(checkpoint):
    """A context manager around LiBai's writing of ``checkpoint``'s weights."""
    return contextlib.nullcontext() if _hook is None else _hook.weights_being_written(checkpoint)
