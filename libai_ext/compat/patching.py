"""Record of the LiBai attributes ``libai_ext.compat`` has replaced (explicit, idempotent)."""
import types

_applied = {}


def qualified_name(owner, name):
    prefix = owner.__name__ if isinstance(owner, types.ModuleType) else f"{owner.__module__}.{owner.__qualname__}"
    return f"{prefix}.{name}"


def replace(owner, name, replacement, reason):
    """``owner.name = replacement``, once; remembers why.  Returns True if it changed something."""
    key = qualified_name(owner, name)
    if key in _applied:
        return False
    setattr(owner, name, replacement)
    _applied[key] = reason
    return True


def applied():
    """``{"module.attribute": reason}`` for every replacement made so far."""
    return dict(_applied)
