"""configs/demo_pipeline_cpu.py whose train dataset also logs what it reads.

``ReadLoggingFolder`` appends each index it reads to ``<read_log>.rank<R>`` (one line per sample; a
loader worker writes to its rank's file too): which samples a run trained on, and in which order.
Set ``dataloader.train.dataset.0.read_log=<path prefix>``; empty (the default) logs nothing.
"""
import os

from libai.config import LazyCall, LazyConfig

from libai_ext.data import CIFAR100Folder

_demo = LazyConfig.load(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs",
                                     "demo_pipeline_cpu.py"))
train, optim, graph, dataloader, model = _demo.train, _demo.optim, _demo.graph, _demo.dataloader, _demo.model


class ReadLoggingFolder(CIFAR100Folder):
    def __init__(self, *args, read_log="", **kwargs):
        super().__init__(*args, **kwargs)
        self.read_log = read_log

    def __getitem__(self, index):
        if self.read_log:
            with open(f"{self.read_log}.rank{os.environ.get('RANK', '0')}", "a") as f:
                f.write(f"{index}\n")
        return super().__getitem__(index)


_folder = dataloader.train.dataset[0]
dataloader.train.dataset = [LazyCall(ReadLoggingFolder)(root=_folder.root, train=True, transform=_folder.transform,
                                                        read_log="")]
