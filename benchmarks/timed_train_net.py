"""tools/train_net.py plus per-rank timings: ``<output_dir>/timing_rank<R>.json``.

Each rank records, per iteration, the step time (between consecutive ``after_step``) and
the data time LiBai's eager trainer measures (``next(loader)`` + ``get_batch``), which
LiBai only logs for rank 0.
"""
import json
import os
import time

from libai.config import default_argument_parser
from libai.engine.hooks import HookBase
from libai.utils import distributed as dist

from libai_ext.engine import launch


class PerRankTiming(HookBase):
    def __init__(self, output_dir):
        self.path = os.path.join(output_dir, f"timing_rank{dist.get_rank()}.json")
        self.step_times, self.data_times, self._last = [], [], None

    def before_train(self):
        original = self.trainer._trainer.write_metrics

        def recording_write_metrics(loss_dict, data_time, prefix=""):
            self.data_times.append(data_time)
            return original(loss_dict, data_time, prefix)

        self.trainer._trainer.write_metrics = recording_write_metrics

    def after_step(self):
        now = time.perf_counter()
        if self._last is not None:
            self.step_times.append(now - self._last)
        self._last = now

    def after_train(self):
        with open(self.path, "w") as f:
            json.dump({"step_times": self.step_times, "data_times": self.data_times}, f)


def main():
    args = default_argument_parser().parse_args()
    cfg, trainer_cls = launch.setup(args)
    trainer = launch.build_trainer(cfg, trainer_cls)
    trainer.register_hooks([PerRankTiming(cfg.train.output_dir)])
    launch.train(cfg, trainer_cls, trainer)


if __name__ == "__main__":
    main()
