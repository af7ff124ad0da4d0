"""LiBai's stochastic layers under ``libai_ext``'s streams, with the user's model code unchanged.

``convert_stochastic_layers(model)`` (called by ``ConsistentBatchTrainer.build_model``) replaces in place, under the
same attribute names (checkpoints keep their keys; the layers hold no state), every ``oneflow.nn.Dropout`` and every
``libai.layers.DropPath`` by libai_ext's ``Dropout`` / ``DropPath`` (``p`` and ``scale_by_keep`` kept).  A module
drawing through a *fused* OneFlow op (``ROLES``) gets the ``Dropout`` its unfused path would have had, so the routed
op (``stochastic_ops``) draws that role's stream: the fused and the unfused model draw the same masks.  A converted
layer follows its parent's pipeline stage (``layer_idx=None``).  Other stochastic modules (``Dropout1d/2d/3d``,
``FusedMLP``, the RNNs) stay: their ops are routed (``stochastic_ops``) or refused by name (``random.audit``).
"""
import oneflow as flow

from .stochastic import DropPath, Dropout

# Modules whose forward calls a fused stochastic op: {(module, class): {op: (role attribute, p attribute)}}.
ROLES = {
    ("libai.layers.attention", "MultiheadAttention"): {
        "fused_scale_mask_softmax_dropout": ("dropout", "attention_dropout_prob"),
        "fused_scale_tril_softmax_mask_scale": ("dropout", "attention_dropout_prob"),
        "fused_bias_add_dropout": ("output_dropout", "output_dropout_prob"),
    },
    ("libai.layers.mlp", "MLP"): {"fused_bias_add_dropout": ("dropout", "output_dropout_prob")},
    ("libai.models.swin_transformer", "WindowAttention"): {"fused_bias_add_dropout": ("proj_drop", "p")},
    ("libai.models.swin_transformer_v2", "WindowAttention"): {"fused_bias_add_dropout": ("proj_drop", "p")},
}


def class_key(module):
    cls = type(module)
    return cls.__module__, cls.__name__


def roles_of(module):
    """``{op: role attribute}`` of a module with fused stochastic ops, else ``{}``."""
    return {op: role for op, (role, _) in ROLES.get(class_key(module), {}).items()}


def _is_libai_drop_path(module):
    return class_key(module)[1] == "DropPath" and class_key(module)[0].startswith("libai.layers")


def _replacement(child):
    if type(child) is flow.nn.Dropout:
        return Dropout(child.p, layer_idx=None)
    if _is_libai_drop_path(child):
        return DropPath(child.drop_prob or 0.0, layer_idx=None, scale_by_keep=getattr(child, "scale_by_keep", True))
    return None


def _add_role_dropouts(module, name, converted):
    for role, p_attribute in ROLES.get(class_key(module), {}).values():
        if not isinstance(getattr(module, role, None), Dropout):
            if not hasattr(module, p_attribute):
                raise AttributeError(f"{name or 'model'} ({type(module).__name__}) has no {p_attribute!r}: this "
                                     f"LiBai version's layer is not the one libai_ext routes its fused dropout for")
            setattr(module, role, Dropout(float(getattr(module, p_attribute)), layer_idx=None).train(module.training))
            converted.append(f"{name}.{role}" if name else role)


def convert_stochastic_layers(model):
    """Replace LiBai's stochastic modules in ``model`` (see the module docstring); returns the
    qualified names of the layers converted or added."""
    converted = []
    for name, module in list(model.named_modules()):
        for child_name, child in list(module._modules.items()):
            replacement = _replacement(child) if child is not None else None
            if replacement is not None:
                replacement.train(child.training)
                setattr(module, child_name, replacement)
                converted.append(f"{name}.{child_name}" if name else child_name)
        _add_role_dropouts(module, name, converted)
    return converted
