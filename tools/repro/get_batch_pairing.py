"""Stock `DefaultTrainer.get_batch` under pipeline parallelism: images keep stage 0's mixup, labels the last stage's.

    python -m oneflow.distributed.launch --nproc_per_node 2 tools/repro/get_batch_pairing.py   # ~30 s

pp=2, dp=1: both ranks read the same 4 samples (ids 0..3, image value == label id), as
LiBai's samplers give them at dp=1, and each rank has its own numpy stream (0.1.1 seeds
nothing, main seeds `seed + rank`).  LiBai 0.1.1's get_batch applies mixup on each rank,
then `to_global` keeps each field of its own stage: the mixed image ids (read on stage 0)
differ from the mixed label ids (stage 1).  LiBai main (#255) makes every field global on
stage 0 first, so the pairs hold there at dp=1.
"""
import inspect

import numpy as np
import oneflow as flow
from flowvision.data import Mixup
from libai.data.structures import DistTensorData, Instance
from libai.engine import DefaultTrainer

from _common import layout, libai_version, verdict

dist = layout(pp=2)
rank = flow.env.get_rank()
np.random.seed(7 + rank)  # any two different streams
ids = flow.arange(4, dtype=flow.int64)
images = ids.to(flow.float32).reshape(-1, 1, 1, 1).expand(-1, 3, 2, 2).contiguous()
data = Instance(images=DistTensorData(images, placement_idx=0), labels=DistTensorData(ids, placement_idx=-1))
mixup = Mixup(mixup_alpha=1.0, cutmix_alpha=0.0, prob=1.0, label_smoothing=0.0, num_classes=4)
kwargs = {"mixup_func": mixup}
if "input_placement_device" in inspect.signature(DefaultTrainer.get_batch).parameters:  # LiBai main
    kwargs["input_placement_device"] = "cpu"
batch = DefaultTrainer.get_batch(data, **kwargs)
replicated = dist.get_nd_sbp([flow.sbp.broadcast, flow.sbp.broadcast])
everywhere = flow.env.all_device_placement("cpu")
image_ids = batch["images"].to_global(sbp=replicated).to_global(placement=everywhere)[:, 0, 0, 0]
soft = batch["labels"].to_global(sbp=replicated).to_global(placement=everywhere)
label_ids = (soft * flow.arange(4, dtype=flow.float32).to_global(placement=everywhere, sbp=flow.sbp.broadcast)).sum(-1)
if rank == 0:
    a, b = image_ids.to_local().numpy(), label_ids.to_local().numpy()
    print(f"libai {libai_version()}: image ids {[round(float(v), 3) for v in a]}, label ids {[round(float(v), 3) for v in b]}")
    verdict(not np.allclose(a, b, atol=1e-4), "images and labels of the global batch are not paired")
