"""LiBai 0.1.1's Swin `window_partition` calls `.view` on a permuted tensor: the model cannot run.

    python tools/repro/swin_view_after_permute.py   # one process, ~5 s
"""
import oneflow as flow
from libai.models.swin_transformer import window_partition

from _common import message, libai_version, verdict

try:
    windows = window_partition(flow.randn(1, 8, 8, 3), 4)
    verdict(False, f"libai {libai_version()}: window_partition works ({tuple(windows.shape)})")
except Exception as e:
    verdict(True, f"libai {libai_version()}: window_partition -> {message(e)}")
