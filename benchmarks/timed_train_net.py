"""tools/train_net.py plus per-rank timings: ``<output_dir>/timing_rank<R>.json``.

Each rank records, per iteration: the step time (between consecutive ``after_step``), the
data time LiBai's eager trainer measures (``next(loader)`` + ``get_batch``, logged by LiBai
for rank 0 only), and the load time (``next(loader)`` alone: reading and augmenting).
Outside stage 0, ``get_batch`` includes waiting for stage 0's batch to arrive.
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
        self.step_times, self.data_times, self.load_times, self._last = [], [], [], None

    def before_train(self):
        eager = self.trainer._trainer
        original = eager.write_metrics

        def recording_write_metrics(loss_dict, data_time, prefix=""):
            self.data_times.append(data_time)
            return original(loss_dict, data_time, prefix)

        eager.write_metrics = recording_write_metrics
        eager._data_loader_iter = self._timed(eager._data_loader_iter)

    def _timed(self, batches):
        while True:
            start = time.perf_counter()
            batch = next(batches)
            self.load_times.append(time.perf_counter() - start)
            yield batch

    def after_step(self):
        now = time.perf_counter()
        if self._last is not None:
            self.step_times.append(now - self._last)
        self._last = now

    def after_train(self):
        with open(self.path, "w") as f:
            json.dump({"step_times": self.step_times, "data_times": self.data_times,
                       "load_times": self.load_times}, f)


def main():
    args = default_argument_parser().parse_args()
    cfg, trainer_cls = launch.setup(args)
    trainer = launch.build_trainer(cfg, trainer_cls)
    trainer.register_hooks([PerRankTiming(cfg.train.output_dir)])
    launch.train(cfg, trainer_cls, trainer)


if __name__ == "__main__":
    main()
