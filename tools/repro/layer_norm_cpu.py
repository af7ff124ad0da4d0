"""`libai.layers.LayerNorm` aborts the process on CPU: `flow._C.layer_norm_affine` has no CPU kernel.

    python tools/repro/layer_norm_cpu.py         # one process, ~10 s

Runs the forward in a child process (it dies with SIGABRT at layer_norm_cpu_kernel.cpp:28
"TODO"); OneFlow's own `flow.nn.functional.layer_norm` computes it on CPU.
"""
import subprocess
import sys

CHILD = """
import oneflow as flow
from libai.layers import LayerNorm
import _common
_common.layout()
norm = LayerNorm(6)
x = flow.randn(3, 6).to_global(placement=norm.weight.placement, sbp=flow.sbp.broadcast)
print("forward ok", norm(x).shape, flush=True)
"""

if __name__ == "__main__":
    import os

    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.abspath(__file__)), timeout=300)
    from _common import libai_version, verdict

    lines = [line for line in (out.stdout + out.stderr).splitlines() if "layer_norm" in line or "forward" in line]
    print(f"libai {libai_version()}: child exit code {out.returncode}; {lines[-1][:200] if lines else ''}")
    verdict(out.returncode != 0, f"LayerNorm forward on CPU ended the process with exit code {out.returncode}")
