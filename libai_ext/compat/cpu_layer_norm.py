"""LiBai's norm layers on CPU tensors (OneFlow 0.9.0): ``libai.layers.LayerNorm`` (both LiBai lines) and
``libai.layers.RMSLayerNorm`` (LiBai main: Llama's, ChatGLM's, Qwen's and Baichuan's only norm).

``LayerNorm`` calls ``flow._C.layer_norm_affine``, whose CPU kernel aborts the process; ``RMSLayerNorm`` calls
``flow._C.rms_norm``, which has no CPU kernel (docs/upstream-bugs.md #7, #33). CPU inputs get the same formula from
CPU-capable ops (functional ``layer_norm``; ``x * rsqrt(mean(x^2) + eps) * weight``); CUDA inputs keep LiBai's
fused path, decided per call.
"""
import oneflow as flow

from .patching import replace


def _on_weight_placement(module, x):
    if module.weight is not None and x.is_global and x.placement != module.weight.placement:
        return x.to_global(placement=module.weight.placement)  # as LiBai main's forwards do
    return x


def cpu_layer_norm(module, x):
    x = _on_weight_placement(module, x)
    if tuple(x.shape[-len(module.normalized_shape):]) != tuple(module.normalized_shape):
        raise ValueError(f"LayerNorm expects trailing shape {module.normalized_shape}, got {tuple(x.shape)}")
    return flow.nn.functional.layer_norm(x, module.normalized_shape, module.weight, module.bias, module.eps)


def cpu_rms_norm(module, x):
    x = _on_weight_placement(module, x)
    normalized = tuple(module.weight.shape)
    if tuple(x.shape[-len(normalized):]) != normalized:
        raise ValueError(f"RMSLayerNorm expects trailing shape {normalized}, got {tuple(x.shape)}")
    dims = tuple(range(x.ndim - len(normalized), x.ndim))
    mean_square = flow.mean(flow.square(x), dim=dims, keepdim=True)
    return x * flow.rsqrt(mean_square + module.l2norm_epsilon) * module.weight


def runs_on_cpu(x):
    return (x.placement.type if x.is_global else x.device.type) == "cpu"


def dispatching_forward(libai_forward, cpu_forward=None):
    """A norm's ``forward`` that takes ``cpu_forward`` (default ``cpu_layer_norm``) for CPU inputs, LiBai's
    otherwise."""
    def forward(self, x):
        if runs_on_cpu(x):
            return (cpu_forward or cpu_layer_norm)(self, x)
        return libai_forward(self, x)

    forward.libai_forward = libai_forward
    return forward


def apply():
    from libai.layers import layer_norm

    replace(layer_norm.LayerNorm, "forward", dispatching_forward(layer_norm.LayerNorm.forward),
            "layer_norm_affine has no CPU kernel in OneFlow 0.9.0", patch="cpu_layer_norm")
    rms = getattr(layer_norm, "RMSLayerNorm", None)  # LiBai main's; 0.1.1 has none
    if rms is not None:
        replace(rms, "forward", dispatching_forward(rms.forward, cpu_rms_norm),
                "rms_norm has no CPU kernel in OneFlow 0.9.0", patch="cpu_rms_norm")
