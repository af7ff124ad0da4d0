"""At build time: the random ops of a model that libai_ext cannot key (``REFUSED``), refused by name.

``audit_stochastic_ops(model, randomness)`` runs after ``layers.convert_stochastic_layers`` and lists, by qualified
name and source line, the OneFlow modules whose ``forward`` reaches a refused op (per the random-op inventory:
``nn.RNN``/``LSTM``/``GRU`` with ``dropout > 0``, the data readers) and the calls to a refused op by name in the
``forward`` of the model's module classes (OneFlow's and libai_ext's exempt).  ``"layout_invariant"`` refuses any
finding (one ``RuntimeError`` listing all), ``"fast"`` warns.  The scan reads source: a refused op inside a helper
function is refused instead when the forward runs (``layers.stochastic_ops``).
"""
import ast
import inspect
import logging
import textwrap

import oneflow as flow

logger = logging.getLogger(__name__)

_RNN_REASON = "its dropout between layers draws inside OneFlow's kernel"
_EMBEDDING_REASON = "an embedding store that initialises new rows with OneFlow's generator"
REFUSED = {  # op of the inventory -> why no key makes it layout-independent
    "rnn_tanh": _RNN_REASON, "rnn_relu": _RNN_REASON, "lstm": _RNN_REASON, "gru": _RNN_REASON,
    "multinomial": "categories sampled by OneFlow's kernel",
    "one_embedding_lookup": _EMBEDDING_REASON, "one_embedding_fused_lookup": _EMBEDDING_REASON,
}
REFUSED.update({op: "a data-pipeline op with a seed of its own" for op in (
    "dispatch_coco_reader", "dispatch_coin_flip", "dispatch_distributed_partial_fc_sample",
    "dispatch_megatron_gpt_mmap_data_loader", "dispatch_ofrecord_image_decoder_random_crop",
    "dispatch_ofrecord_reader", "dispatch_onerec_reader", "dispatch_raw_reader")})
_DRAW_ONLY_WITH_DROPOUT = ("rnn_tanh", "rnn_relu", "lstm", "gru")  # modules refused where dropout > 0
_EXEMPT_PACKAGES = ("oneflow.", "libai_ext.")


class StochasticModelError(RuntimeError):
    """The model draws randomness libai_ext cannot key (``train.randomness="layout_invariant"``)."""


def refused_modules():
    """``{OneFlow module class: the refused ops its forward reaches}`` (from the random-op inventory)."""
    from .oneflow_draws import inventory

    found = {}
    for qualified, ops in inventory()["python"].items():
        prefix, _, name = qualified.rpartition(".")
        cls = getattr(flow.nn, name, None) if prefix == "oneflow.nn" else None
        refused = [op for op in ops if op in REFUSED]
        if cls is not None and refused:
            found[cls] = refused
    return found


def _refused_module(module, refused):
    ops = refused.get(type(module))
    if not ops:
        return None
    if all(op in _DRAW_ONLY_WITH_DROPOUT for op in ops) and not float(getattr(module, "dropout", 0.0) or 0.0) > 0:
        return None
    return f"a oneflow.nn.{type(module).__name__} module ({REFUSED[ops[0]]})"


def _called_name(node):
    """The function a call names (``flow.rand`` -> ``rand``); None for ``self.<attribute>(...)``, a
    submodule or method of the module itself (``self.drop_path(x)`` is a layer, not LiBai's function)."""
    func = node.func
    if isinstance(func, ast.Attribute):
        return None if isinstance(func.value, ast.Name) and func.value.id == "self" else func.attr
    return func.id if isinstance(func, ast.Name) else None


def random_calls_in_forward(cls):
    """``[(op, "file:line")]`` of calls to refused ops in ``cls.forward``'s source (``[]`` if unreadable)."""
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
            if isinstance(node, ast.Call) and _called_name(node) in REFUSED]


def _running_forward(cls):
    """The class whose ``forward`` an instance of ``cls`` runs, or None if it is exempt."""
    owner = next((c for c in cls.__mro__ if "forward" in c.__dict__), None)
    if owner is None or owner is flow.nn.Module or owner.__module__.startswith(_EXEMPT_PACKAGES):
        return None
    return owner


def stochastic_findings(model):
    """Every finding (see the module docstring), as messages naming the modules and the source line."""
    findings, calls, refused = [], {}, refused_modules()  # calls: (class, op, site) -> module names
    for name, module in model.named_modules():
        label = name or "model"
        found = _refused_module(module, refused)
        if found is not None:
            findings.append(f"{label}: {found}")
        owner = _running_forward(type(module))
        if owner is not None:
            for op, site in random_calls_in_forward(owner):
                calls.setdefault((owner.__name__, op, site), []).append(label)
    for (cls_name, op, site), names in calls.items():
        where = names[0] if len(names) == 1 else f"{names[0]} and {len(names) - 1} more"
        findings.append(f"{where} ({cls_name}.forward): calls {op} at {site} ({REFUSED[op]})")
    return findings


def audit_stochastic_ops(model, randomness):
    """Refuse (layout_invariant) or warn about (fast) every finding; returns them."""
    findings = stochastic_findings(model)
    if not findings:
        return findings
    if randomness == "layout_invariant":
        raise StochasticModelError(
            "train.randomness='layout_invariant': the model draws randomness libai_ext cannot key by global "
            "position (docs/randomness.md lists what each random op does; or train.randomness='fast'):\n  "
            + "\n  ".join(findings))
    for finding in findings:
        logger.warning(f"train.randomness='fast': {finding}; OneFlow's generator draws it, per rank and layout")
    return findings
