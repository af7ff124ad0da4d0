"""Parameters that appear after ``build_model``: refused or warned about at the first forward.

LiBai's trainers (both lines) build the optimizer from ``model.parameters()`` right after ``build_model``, so a
parameter created later (lazily in ``forward``, or a module swapped in) is never trained and not drawn from
``train.seed`` (docs/init.md). ``watch_late_parameters`` checks once, in a hook after the first forward (before any
optimizer step): ``refuse=True`` raises, ``refuse=False`` warns, both naming every late parameter. Every rank sees
the same parameters, so all raise together and none is left waiting.
"""
import logging

logger = logging.getLogger(__name__)


def late_parameters(model, known):
    """Qualified names of ``model``'s parameters whose ids are not in ``known``."""
    return [name for name, parameter in model.named_parameters() if id(parameter) not in known]


def _message(names):
    return (f"parameters created after build_model (lazily in forward, or set on the model later): "
            f"{', '.join(names)}. LiBai builds the optimizer from the parameters right after build_model, so "
            f"these are never trained, and their initial values do not come from train.seed. Create them in "
            f"the model's __init__.")


def watch_late_parameters(model, refuse):
    """Check at ``model``'s first forward that its parameters are still those it has at this call."""
    # The tensors themselves, not only their ids: a replaced parameter could free its id for a new one.
    state = {"known": list(model.parameters())}

    def check(module, inputs, output):
        if state["known"] is None:
            return None
        names = late_parameters(module, {id(parameter) for parameter in state["known"]})
        state["known"] = None
        if names and refuse:
            raise RuntimeError(f"train.randomness='layout_invariant' refuses {_message(names)}")
        if names:
            logger.warning(_message(names))
        return None

    model.register_forward_hook(check)
    return model
