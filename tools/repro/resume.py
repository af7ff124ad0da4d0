"""Two resume bugs of `DefaultTrainer.__init__`, on one process (~30 s).

    python tools/repro/resume.py

1. LiBai computes the resumed sampler position into `cfg.dataloader.consumed_samples`,
   but builds the loader from `cfg.dataloader.train`, which never sees it: a resumed run
   reads the data from the first sample again (0.1.1 and main).
2. After a finished run `last_checkpoint` says `model_final`; `--resume` then crashes
   with `int('final')` (0.1.1) or is refused by an assertion (main) instead of loading it.

Uses this repository's demo config on one rank, with LiBai's broken compile step skipped
(see compile_step.py) and the keys LiBai main needs on CPU.
"""
import argparse
import os
import sys
import tempfile

from libai.config import LazyConfig
from libai.engine import DefaultTrainer, default, default_setup

from _common import libai_version, message, verdict

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)  # the demo config's model and data live in libai_ext

default._compile_dependencies = lambda: None  # the step itself is compile_step.py's bug


WORK = tempfile.mkdtemp(prefix="libai-resume-")


def build_trainer(resume):
    cfg = LazyConfig.load(os.path.join(ROOT, "configs", "demo_pipeline_cpu.py"))
    cfg.train.output_dir = WORK
    cfg.train.dist.pipeline_parallel_size = 1
    cfg.dataloader.train.dataset[0].root.root = os.path.join(WORK, "data")
    cfg.dataloader.test[0].dataset.root.root = os.path.join(WORK, "data")
    for key, value in (("rdma_enabled", False), ("input_placement_device", "cpu")):  # read by LiBai main
        cfg.train.setdefault(key, value)
    cfg.train.dist.setdefault("device_type", "cpu")
    default_setup(cfg, argparse.Namespace(resume=resume, config_file="", eval_only=False))
    return cfg, DefaultTrainer(cfg)


def trainer_resuming_from(last_checkpoint):
    with open(os.path.join(WORK, "last_checkpoint"), "w") as f:
        f.write(last_checkpoint)
    return build_trainer(resume=True)


_, first = build_trainer(resume=False)
for name in ("model_0000009", "model_final"):  # a run stopped after iteration 9, and a finished one
    first.checkpointer.save(name)
cfg, trainer = trainer_resuming_from("model_0000009")  # as if stopped after iteration 9
sampler = trainer.train_loader.batch_sampler  # LiBai's CyclicSampler
print(f"libai {libai_version()}: start_iter {trainer.start_iter}, cfg.dataloader.consumed_samples "
      f"{cfg.dataloader.consumed_samples}, train loader's sampler.consumed_samples {sampler.consumed_samples}")
verdict(sampler.consumed_samples != cfg.dataloader.consumed_samples,
        "the resumed position does not reach the train loader's sampler")
try:
    trainer_resuming_from("model_final")
    verdict(False, "resuming after a finished run (last_checkpoint = model_final) works")
except (ValueError, AssertionError) as e:
    verdict(True, f"resuming after a finished run (last_checkpoint = model_final) -> {message(e)}")
