"""Each rank reports what OneFlow sees of CUDA (for the harness's device pinning test)."""
import os

import oneflow as flow

from libai_ext.testing import write_rank_result

write_rank_result(cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
                  device_count=flow.cuda.device_count(), cuda_available=flow.cuda.is_available())
