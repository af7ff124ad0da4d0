"""At build time: the stochastic ops a model would draw outside ``libai_ext``'s streams.

``audit_stochastic_ops(model, randomness)`` runs after ``layers.convert_stochastic_layers`` and
lists, by qualified name and source line:

* stochastic OneFlow modules with no ``libai_ext`` counterpart (``Dropout1d/2d/3d``,
  ``AlphaDropout``, ``FeatureAlphaDropout``, ``RReLU``) and any ``nn.Dropout`` / LiBai
  ``DropPath`` still in the model;
* calls, in the ``forward`` of any module class of the model (OneFlow's and ``libai_ext``'s own
  excepted), to OneFlow's random factories and in-place draws (``rand``, ``randn``, ``randint``,
  ``randperm``, ``bernoulli``, ``normal``, ``uniform_``, ``normal_``, ..., and LiBai's
  ``drop_path`` function): they draw from OneFlow's generators, which depend on the rank and the
  layout.  Dropout-family calls (``dropout``, the fused dropouts) are not listed: they are routed to
  the calling module's stream (``layers.stochastic_ops``).

Under ``train.randomness="layout_invariant"`` any finding is refused (``RuntimeError`` listing
them all); under ``"fast"`` each is a warning.  The scan reads source code: a draw hidden in a
helper function the forward calls is not seen here, but ``stochastic_ops`` refuses it when the
forward runs.
"""
import ast
import inspect
import logging
import textwrap

import oneflow as flow

logger = logging.getLogger(__name__)

UNCOVERED_MODULES = ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout", "RReLU")
RANDOM_CALLS = ("rand", "randn", "rand_like", "randn_like", "randint", "randint_like", "randperm", "bernoulli",
                "normal", "multinomial", "uniform_", "normal_", "bernoulli_", "exponential_", "random_", "drop_path")
_EXEMPT_PACKAGES = ("oneflow.", "libai_ext.")


class StochasticModelError(RuntimeError):
    """The model draws randomness libai_ext cannot key (``train.randomness="layout_invariant"``)."""


def _uncovered_module(module):
    cls = type(module)
    if cls.__module__.startswith("oneflow.nn") and cls.__name__ in UNCOVERED_MODULES:
        return f"oneflow.nn.{cls.__name__}"
    if cls.__name__ == "DropPath" and cls.__module__.startswith("libai.layers"):
        return "libai.layers.DropPath"
    return None


def _called_name(node):
    """The function a call names (``flow.rand`` -> ``rand``); None for ``self.<attribute>(...)``, a
    submodule or method of the module itself (``self.drop_path(x)`` is a layer, not LiBai's function)."""
    func = node.func
    if isinstance(func, ast.Attribute):
        return None if isinstance(func.value, ast.Name) and func.value.id == "self" else func.attr
    return func.id if isinstance(func, ast.Name) else None


def random_calls_in_forward(cls):
    """``[(op, "file:line")]`` of random calls in ``cls.forward``'s source (``[]`` if unreadable)."""
    forward = cls.__dict__.get("forward")
    if forward is None:
        return []
    try:
        lines, first = inspect.getsourcelines(forward)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return []
    path = inspect.getsourcefile(forward)
    return [(_called_name(node), f"{path}:{first + node.lineno - 1}") for node in ast.walk(tree)
            if isinstance(node, ast.Call) and _called_name(node) in RANDOM_CALLS]


def _running_forward(cls):
    """The class whose ``forward`` an instance of ``cls`` runs, or None if it is exempt."""
    owner = next((c for c in cls.__mro__ if "forward" in c.__dict__), None)
    if owner is None or owner is flow.nn.Module or owner.__module__.startswith(_EXEMPT_PACKAGES):
        return None
    return owner


def stochastic_findings(model):
    """Every finding (see the module docstring), as messages naming the modules and the source line."""
    findings, calls = [], {}  # calls: (class, op, site) -> module names
    for name, module in model.named_modules():
        label = name or "model"
        uncovered = _uncovered_module(module)
        if uncovered is not None:
            findings.append(f"{label}: a {uncovered} module (no layout-invariant counterpart)")
        owner = _running_forward(type(module))
        if owner is not None:
            for op, site in random_calls_in_forward(owner):
                calls.setdefault((owner.__name__, op, site), []).append(label)
    for (cls_name, op, site), names in calls.items():
        where = names[0] if len(names) == 1 else f"{names[0]} and {len(names) - 1} more"
        findings.append(f"{where} ({cls_name}.forward): calls {op} at {site}")
    return findings


def audit_stochastic_ops(model, randomness):
    """Refuse (layout_invariant) or warn about (fast) every finding; returns them."""
    findings = stochastic_findings(model)
    if not findings:
        return findings
    if randomness == "layout_invariant":
        raise StochasticModelError(
            "train.randomness='layout_invariant': the model draws randomness libai_ext cannot key by global "
            "position (use libai_ext.layers.Dropout / DropPath, or train.randomness='fast'):\n  "
            + "\n  ".join(findings))
    for finding in findings:
        logger.warning(f"train.randomness='fast': {finding}; OneFlow's generator draws it, per rank and layout")
    return findings
