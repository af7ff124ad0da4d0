"""LiBai 0.1.1's ``SwinTransformer``: the two things that keep it from training on OneFlow 0.9.0.

* ``window_partition`` / ``window_reverse`` call ``.view`` after ``.permute``, which OneFlow 0.9.0 refuses ("view
  size is not compatible with input tensor's size and stride"), so the model does not build: replaced with ``reshape``.
* Its blocks have no pipeline layer index: every parameter sits on stage 0, and under pipeline parallelism the logits
  never meet the labels (last stage). After LiBai's constructor the model is laid out as LiBai main's Swin: blocks
  numbered across the stages, each stage's patch merge with its last block, the patch embedding on layer 0, the final
  norm and head on layer -1. Each placed module gets ``layer_idx``, its parameters and buffers move to that layer's
  placement, and a forward pre-hook moves its input there.

Each repair is applied only where the installed Swin needs it (``needs_view_repair``, ``lacks_layer_index``), so
LiBai main's Swin is left alone.
"""
import functools
import inspect

import oneflow as flow

from .patching import replace


def window_partition(x, window_size):
    """``(B, H, W, C)`` -> ``(B * H/ws * W/ws, ws, ws, C)``: the windows, row by row."""
    B, H, W, C = x.shape
    x = x.reshape(B, H // window_size, window_size, W // window_size, window_size, C)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, window_size, window_size, C)


def window_reverse(windows, window_size, H, W):
    """The inverse of ``window_partition``: windows back to ``(B, H, W, C)``."""
    B = windows.shape[0] // ((H // window_size) * (W // window_size))
    x = windows.reshape(B, H // window_size, W // window_size, window_size, window_size, -1)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(B, H, W, -1)


def needs_view_repair(swin_module):
    """Whether the installed ``window_partition`` fails on a (tiny, local) input."""
    try:
        swin_module.window_partition(flow.zeros(1, 4, 4, 1), 2)
    except RuntimeError:
        return True
    return False


def lacks_layer_index(swin_module):
    return "layer_idx" not in inspect.signature(swin_module.SwinTransformerBlock.__init__).parameters


def stage_layout(model):
    """``[(module, layer_idx)]`` of LiBai main's Swin layout for a 0.1.1 ``SwinTransformer``."""
    placed = [(model.patch_embed, 0)]
    first = 0
    for layer in model.layers:
        placed += [(block, first + i) for i, block in enumerate(layer.blocks)]
        first += len(layer.blocks)
        if layer.downsample is not None:
            placed.append((layer.downsample, first - 1))
    placed += [(model.norm, -1), (model.head, -1)]
    return placed


def _move_to(module, placement):
    """Every parameter and buffer of ``module`` (recursively) onto ``placement``, same sbp."""
    for owner in module.modules():
        for name, param in list(owner._parameters.items()):
            if param is not None and param.is_global and param.placement != placement:
                owner._parameters[name] = flow.nn.Parameter(param.to_global(placement=placement),
                                                            requires_grad=param.requires_grad)
        for name, buffer in list(owner._buffers.items()):
            if buffer is not None and buffer.is_global and buffer.placement != placement:
                owner._buffers[name] = buffer.to_global(placement=placement)


def _inputs_follow(placement):
    def move_inputs(module, inputs):
        return tuple(x.to_global(placement=placement) if isinstance(x, flow.Tensor) and x.is_global
                     and x.placement != placement else x for x in inputs)
    return move_inputs


def place_on_stages(model):
    """Lay a 0.1.1 ``SwinTransformer`` out over the pipeline stages (see the module docstring)."""
    from libai.utils import distributed as dist

    for module, layer_idx in stage_layout(model):
        placement = dist.get_layer_placement(layer_idx)
        module.layer_idx = layer_idx
        _move_to(module, placement)
        module.register_forward_pre_hook(_inputs_follow(placement))
    if getattr(model, "absolute_pos_embed", None) is not None:
        _move_to_parameter(model, "absolute_pos_embed", dist.get_layer_placement(0))
    return model


def _move_to_parameter(model, name, placement):
    param = model._parameters[name]
    if not param.is_global:  # 0.1.1 creates it local: make it a replicated stage-0 parameter
        from libai.utils import distributed as dist

        sbp = dist.get_nd_sbp([flow.sbp.broadcast, flow.sbp.broadcast])
        model._parameters[name] = flow.nn.Parameter(param.to_global(placement=placement, sbp=sbp),
                                                    requires_grad=param.requires_grad)


def _staged_init(libai_init):
    @functools.wraps(libai_init)
    def __init__(self, *args, **kwargs):
        libai_init(self, *args, **kwargs)
        place_on_stages(self)
    return __init__


def apply(view_repair=None, layer_index=None):
    """Repair what the installed ``libai.models.swin_transformer`` needs; returns the repairs made."""
    import libai.models.swin_transformer as swin

    made = []
    if needs_view_repair(swin) if view_repair is None else view_repair:
        reason = "window_partition/window_reverse call .view after .permute (OneFlow 0.9.0 refuses it)"
        made += [name for name, fn in (("window_partition", window_partition), ("window_reverse", window_reverse))
                 if replace(swin, name, fn, reason, patch="swin_v0_1")]
    if lacks_layer_index(swin) if layer_index is None else layer_index:
        if replace(swin.SwinTransformer, "__init__", _staged_init(swin.SwinTransformer.__init__),
                   "SwinTransformer's blocks have no pipeline layer index (all on stage 0)", patch="swin_v0_1"):
            made.append("SwinTransformer.__init__")
    return made
