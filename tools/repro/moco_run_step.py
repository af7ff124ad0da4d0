"""LiBai main's MoCo v3 project calls its trainer's ``run_step`` with 0.1.1's arguments.

    python tools/repro/moco_run_step.py PROJECTS   # LiBai main; PROJECTS: the projects folder of LiBai main

``projects/MOCOV3/trainer/moco_trainer.py`` defines ``run_step(self, get_batch)`` and calls ``get_batch(data,
mixup_func)``, as LiBai 0.1.1's ``EagerTrainer`` did; LiBai main's ``DefaultTrainer.run_step`` calls
``self._trainer.run_step(self.get_batch, input_placement_device)``, and main's ``get_batch`` takes the device
second.  The first training step raises a ``TypeError``.
"""
import inspect
import os
import sys

from _common import libai_version, verdict

from libai.engine.default import DefaultTrainer

sys.path.insert(0, os.path.join(sys.argv[1], "MOCOV3"))
from trainer.moco_trainer import MoCoEagerTrainer  # noqa: E402

takes = list(inspect.signature(MoCoEagerTrainer.run_step).parameters)
calls_with_device = "input_placement_device)" in inspect.getsource(DefaultTrainer.run_step)
verdict(takes == ["self", "get_batch"] and calls_with_device,
        f"libai {libai_version()}: MoCoEagerTrainer.run_step takes {takes[1:]}; DefaultTrainer.run_step passes "
        f"{'get_batch and input_placement_device' if calls_with_device else 'get_batch alone'}")
