"""OneFlow's own random functions, watched: each draw is counted, and checked first.

``watch_oneflow_draws()`` (explicit, idempotent, process-wide; forked loader workers inherit it)
wraps OneFlow's random factories (``rand``, ``randn``, ``randint``, ``randperm``, ``bernoulli``,
``normal``, their ``_like`` forms, ``multinomial``, under ``oneflow.<name>``, ``oneflow._C.<name>``
and ``oneflow.nn.functional.<name>``) and in-place draws (``Tensor.uniform_``, ``normal_``, ...).
The values are OneFlow's; the wrappers only

* count the draws (``draw_count``): keyed augmentation waits for OneFlow's queued kernels before
  re-seeding the generator only when the previous sample drew from it (an eager kernel reads its
  generator when it runs, not when it is queued; waiting after every sample cost 3-4x the
  augmentation itself);
* run the checks others register (``add_draw_check``): ``layers.stochastic_ops`` refuses draws
  inside the trained model's forward.
"""
import sys

import oneflow as flow

FACTORIES = ("rand", "randn", "rand_like", "randn_like", "randint", "randint_like", "randperm", "bernoulli",
             "normal", "multinomial")
METHODS = ("uniform_", "normal_", "bernoulli_", "exponential_", "random_", "cauchy_", "log_normal_", "geometric_")
_NAMESPACES = (flow._C, flow, flow.nn.functional)

_originals = {}  # (namespace, name) -> OneFlow's own
_checks = []
_draws = 0


def _watched(name, original):
    def draw(*args, **kwargs):
        global _draws
        _draws += 1
        if _checks:
            frame = sys._getframe(1)
            for check in _checks:
                check(name, frame)
        return original(*args, **kwargs)
    draw.__name__ = name
    draw.__wrapped__ = original
    return draw


def watch_oneflow_draws():
    """Install the wrappers (once per process)."""
    if _originals:
        return
    for namespace in _NAMESPACES:
        for name in FACTORIES:
            original = getattr(namespace, name, None)
            if original is not None:
                _originals[(namespace, name)] = original
                setattr(namespace, name, _watched(name, original))
    for name in METHODS:
        original = getattr(flow.Tensor, name, None)
        if original is not None:
            _originals[(flow.Tensor, name)] = original
            setattr(flow.Tensor, name, _watched(f"Tensor.{name}", original))


def unwatch_oneflow_draws():
    for (namespace, name), original in _originals.items():
        setattr(namespace, name, original)
    _originals.clear()


def watching():
    return bool(_originals)


def draw_count():
    """OneFlow draws made in this process since it started watching."""
    return _draws


def add_draw_check(check):
    """``check(name, calling frame)`` runs before every draw (may raise); added once."""
    if check not in _checks:
        _checks.append(check)


def remove_draw_check(check):
    if check in _checks:
        _checks.remove(check)
