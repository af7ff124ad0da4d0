"""tools/train_net.py plus per-rank timings: ``<output_dir>/timing_rank<R>.json``.

Each rank records, per iteration: the step time (between consecutive ``after_step``), the
CPU time this process spent in that interval (all its threads: ``time.process_time``; summed over
ranks on a host with more ranks than cores it comes to about the cores times the step, so it tells
whether the ranks had the cores to themselves, not how much work a step is), the
data time LiBai's eager trainer measures (``next(loader)`` + ``get_batch``, logged by LiBai
for rank 0 only), and the load time (``next(loader)`` alone: reading and augmenting).
Outside stage 0, ``get_batch`` includes waiting for stage 0's batch to arrive.

With ``PROFILE_FROM=<n>`` in the environment, each rank also runs Python's profiler from its
``n``-th step to the end and writes ``<output_dir>/profile_rank<R>.out`` (``benchmarks/step_profile.py``);
in graph mode it also writes the train graph's ops on this rank, counted by type
(``<output_dir>/graph_ops_rank<R>.json``).
"""
import collections
import cProfile
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
        self.step_times, self.cpu_times, self.data_times, self.load_times = [], [], [], []
        self._last = None

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
        now = time.perf_counter(), time.process_time()
        if self._last is not None:
            self.step_times.append(now[0] - self._last[0])
            self.cpu_times.append(now[1] - self._last[1])
        self._last = now

    def after_train(self):
        with open(self.path, "w") as f:
            json.dump({"step_times": self.step_times, "cpu_times": self.cpu_times, "data_times": self.data_times,
                       "load_times": self.load_times}, f)


class PerRankProfile(HookBase):
    """Python's profiler over steps ``first`` to the end of training (all of each step's calls)."""

    def __init__(self, output_dir, first):
        self.path = os.path.join(output_dir, f"profile_rank{dist.get_rank()}.out")
        self.first, self.steps, self.profiler = first, 0, cProfile.Profile()

    def before_step(self):
        self.steps += 1
        if self.steps == self.first:
            self.profiler.enable()

    def after_train(self):
        self.profiler.disable()
        self.profiler.dump_stats(self.path)
        graph = getattr(self.trainer, "graph_train", None)
        if graph is not None:
            with open(os.path.join(os.path.dirname(self.path), f"graph_ops_rank{dist.get_rank()}.json"), "w") as f:
                json.dump(graph_op_counts(graph), f)


def graph_op_counts(graph):
    """``{op type: count}`` of a compiled ``nn.Graph``'s job on this rank (forward, backward, update)."""
    counts = collections.Counter()
    for op in graph._full_job_proto.net.op:
        counts[op.user_conf.op_type_name if op.HasField("user_conf") else op.WhichOneof("op_type")] += 1
    return dict(counts)


def main():
    args = default_argument_parser().parse_args()
    cfg, trainer_cls = launch.setup(args)
    trainer = launch.build_trainer(cfg, trainer_cls)
    hooks = [PerRankTiming(cfg.train.output_dir)]
    if os.environ.get("PROFILE_FROM"):
        hooks.append(PerRankProfile(cfg.train.output_dir, int(os.environ["PROFILE_FROM"])))
    trainer.register_hooks(hooks)
    launch.train(cfg, trainer_cls, trainer)


if __name__ == "__main__":
    main()
