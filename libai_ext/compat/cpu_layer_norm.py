"""``libai.layers.LayerNorm`` on CPU tensors (both LiBai lines, OneFlow 0.9.0).

LiBai's ``LayerNorm.forward`` calls ``flow._C.layer_norm_affine``, whose CPU kernel aborts
the process (``layer_norm_cpu_kernel.cpp:28] TODO``).  OneFlow's functional
``layer_norm`` computes the same result from CPU-capable ops.  The choice is made per
call from the input's device, so CUDA inputs still take LiBai's own (fused) path.
"""
import oneflow as flow

from .patching import replace


def cpu_layer_norm(module, x):
    if module.weight is not None and x.is_global and x.placement != module.weight.placement:
        x = x.to_global(placement=module.weight.placement)  # as LiBai main's forward does
    if tuple(x.shape[-len(module.normalized_shape):]) != tuple(module.normalized_shape):
        raise ValueError(f"LayerNorm expects trailing shape {module.normalized_shape}, got {tuple(x.shape)}")
    return flow.nn.functional.layer_norm(x, module.normalized_shape, module.weight, module.bias, module.eps)


def runs_on_cpu(x):
    return (x.placement.type if x.is_global else x.device.type) == "cpu"


def dispatching_forward(libai_forward):
    """A ``LayerNorm.forward`` that takes ``cpu_layer_norm`` for CPU inputs, LiBai's otherwise."""
    def forward(self, x):
        if runs_on_cpu(x):
            return cpu_layer_norm(self, x)
        return libai_forward(self, x)

    forward.libai_forward = libai_forward
    return forward


def apply():
    from libai.layers.layer_norm import LayerNorm

    replace(LayerNorm, "forward", dispatching_forward(LayerNorm.forward),
            "layer_norm_affine has no CPU kernel in OneFlow 0.9.0", patch="cpu_layer_norm")
