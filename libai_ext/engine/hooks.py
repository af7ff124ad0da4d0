"""Training hooks."""
import json
import os

from libai.engine.hooks import HookBase
from libai.utils import distributed as dist


class RawLossWriter(HookBase):
    """Append each iteration's unsmoothed losses to ``<output_dir>/losses.jsonl`` (main process).

    LiBai's ``metrics.json`` holds running medians; comparing runs step by step (resume
    exactness, graph vs eager) needs the raw values.
    """

    def __init__(self, output_dir):
        self.path = os.path.join(output_dir, "losses.jsonl")

    def after_step(self):
        if not dist.is_main_process():
            return
        storage = self.trainer.storage
        losses = {k: v.latest() for k, v in storage.histories().items() if k.endswith("loss")}
        with open(self.path, "a") as f:
            f.write(json.dumps({"iteration": self.trainer.iter, **losses}) + "\n")
