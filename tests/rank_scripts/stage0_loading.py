"""On every rank: the same seeded pipeline with and without stage-0-only loading (pairing.py ``--stage0-loading``
runs it after its cases, in the same launch).

Augmentation and mixup on, per-rank random streams.  Stage-0 ranks report a digest of
every global field (gathered to stage 0) per step; every rank reports how many samples
its dataset served.
"""
import hashlib

from libai.config import LazyCall

from common import image_loader_config, on_stage0, replicated_on_stage0
from libai_ext import ConsistentBatchTrainer, mixup_step, seed_everything
from libai_ext.compat.get_batch_api import call_get_batch
from libai_ext.data import CIFAR100Folder, build_mixup, cifar_train_transform
from libai_ext.testing import write_rank_result

STEPS = 3


class CountingFolder(CIFAR100Folder):
    served = 0

    def __getitem__(self, index):
        CountingFolder.served += 1
        return super().__getitem__(index)


def config(data_root, stage0_only):
    folder = LazyCall(CountingFolder)(root=data_root, train=True,
                                      transform=LazyCall(cifar_train_transform)(hflip=False))
    # the check by effect reads sampled items again: off, so that what a rank's dataset served is what it loaded
    return image_loader_config(folder, 8, LazyCall(build_mixup)(num_classes=10), stage0_only_loading=stage0_only,
                               augmentation_check=dict(action="off"))


def digests(loader):
    out, batches = [], iter(loader)
    for step in range(STEPS):
        with mixup_step(step):
            batch = call_get_batch(ConsistentBatchTrainer.get_batch, next(batches), loader.mixup_func)
        gathered = {k: replicated_on_stage0(v) for k, v in sorted(batch.items())}
        if on_stage0():
            out.append({k: hashlib.sha256(v.numpy().tobytes()).hexdigest() for k, v in gathered.items()})
    return out


def report(data):
    """One record per pass (the default path, then stage-0-only) on every rank (the layout is set up)."""
    for stage0_only in (False, True):
        seed_everything(1234, scope="rank")
        CountingFolder.served = 0
        loader = ConsistentBatchTrainer.build_train_loader(config(data, stage0_only))[0]
        write_rank_result(check="stage0_loading", stage0_only=stage0_only, digests=digests(loader),
                          served=CountingFolder.served, loader=type(loader).__name__)

