"""`dist.ttol(..., ranks=...)` and the evaluator's `pad_batch` build "cuda" placements whatever the tensor's device.

    python tools/repro/ttol_cuda.py              # one process, CPU-only host, ~5 s

LiBai's metrics writer calls `ttol(loss, ranks=[0])`; on CPU ranks it fails with
"Placement is invalid because there is no device!".  LiBai main added a `device="cuda"`
argument to `ttol` and `pad_batch`, but the evaluator still calls `pad_batch` without it.
"""
import inspect

import oneflow as flow
from libai.evaluation import utils as evaluation_utils

from _common import message, layout, libai_version, verdict

dist = layout()
print(f"libai {libai_version()}; ttol{inspect.signature(dist.ttol)}; "
      f"pad_batch{inspect.signature(evaluation_utils.pad_batch)}")
x = flow.ones(4, placement=flow.placement("cpu", [0]), sbp=flow.sbp.broadcast)
try:
    dist.ttol(x, ranks=[0])
    verdict(False, "ttol on a CPU tensor worked")
except Exception as e:
    verdict(True, f"ttol(cpu tensor, ranks=[0]) -> {message(e)}")
batch = {"images": flow.ones(3, 2, placement=flow.placement("cpu", [0]), sbp=flow.sbp.broadcast)}
try:
    evaluation_utils.pad_batch(batch, 4, 1, True)  # the last batch: 3 rows of 4, as the evaluator calls it
    verdict(False, "pad_batch on CPU tensors worked")
except Exception as e:
    verdict(True, f"pad_batch(cpu tensors) -> {message(e)}")
