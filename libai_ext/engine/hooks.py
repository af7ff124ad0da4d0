"""Training hooks."""
import json
import os

from libai.engine.hooks import HookBase
from libai.utils import distributed as dist

from .raw_losses import RAW_LOSSES_FILE


class RawLossWriter(HookBase):
    """Append each iteration's unsmoothed losses to ``<output_dir>/losses.jsonl`` (main process).

    LiBai's ``metrics.json`` holds running medians; step-by-step comparisons (resume exactness, graph vs eager) need the
    raw values, which ``libai_ext.testing.read_raw_losses`` and ``raw_losses_by_run`` read back."""

    def __init__(self, output_dir):
        self.path = os.path.join(output_dir, RAW_LOSSES_FILE)

    def after_step(self):
        if not dist.is_main_process():
            return
        storage = self.trainer.storage
        losses = {k: v.latest() for k, v in storage.histories().items() if k.endswith("loss")}
        with open(self.path, "a") as f:
            f.write(json.dumps({"iteration": self.trainer.iter, **losses}) + "\n")
