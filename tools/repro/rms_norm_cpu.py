"""LiBai main's `RMSLayerNorm` cannot run on CPU: OneFlow 0.9.0 has no CPU kernel for `rms_norm`.

    python tools/repro/rms_norm_cpu.py         # one process, ~10 s, LiBai main (0.1.1 has no RMSLayerNorm)

Llama's, ChatGLM's, Qwen's and Baichuan's only norm; `x * rsqrt(mean(x^2) + eps) * weight` from CPU ops computes
it.  Runs stock LiBai's layer only (`libai_ext` not imported).
"""
import oneflow as flow

from _common import layout, libai_version, message, verdict

from libai.layers import RMSLayerNorm

layout()
norm = RMSLayerNorm(8)
x = flow.randn(2, 8).to_global(placement=norm.weight.placement, sbp=flow.sbp.broadcast)
try:
    norm(x)
    error = None
except RuntimeError as caught:
    error = caught
print(f"libai {libai_version()}: {message(error) if error else 'forward ok'}")
verdict(error is not None and "rms_norm" in str(error), "RMSLayerNorm's forward on a CPU tensor finds no kernel")
