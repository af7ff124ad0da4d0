"""``flow._C.fused_bias_add_gelu`` on CPU tensors (OneFlow 0.9.0, both LiBai lines).

LiBai's ``MLP(bias_gelu_fusion=True)`` calls it (Swin hard-codes it in every block); OneFlow 0.9.0 has no CPU kernel
("Cannot find the kernel matching ... fused_bias_add_gelu"). CPU inputs get ``gelu(bias_add(x, bias, axis))`` (exact
erf GeLU, as the fused kernel); CUDA inputs keep the fused kernel, decided per call.
"""
import oneflow as flow

from .cpu_layer_norm import runs_on_cpu
from .patching import replace


def composed_bias_add_gelu(x, bias, axis=1):
    return flow.nn.functional.gelu(flow._C.bias_add(x, bias, axis=axis))


def dispatching_bias_add_gelu(fused):
    """A ``fused_bias_add_gelu`` that composes on CPU inputs and calls ``fused`` otherwise."""
    def fused_bias_add_gelu(x, bias, axis=1):
        if runs_on_cpu(x):
            return composed_bias_add_gelu(x, bias, axis=axis)
        return fused(x, bias, axis=axis)

    fused_bias_add_gelu.fused = fused
    return fused_bias_add_gelu


def apply():
    replace(flow._C, "fused_bias_add_gelu", dispatching_bias_add_gelu(flow._C.fused_bias_add_gelu),
            "fused_bias_add_gelu has no CPU kernel in OneFlow 0.9.0 (LiBai's Swin hard-codes it)", patch="cpu_bias_gelu")  # noqa: E501
