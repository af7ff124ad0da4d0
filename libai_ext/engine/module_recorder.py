"""Record what each module computes, per iteration, as small fingerprints of the *global* values.

``tools/check_equivalence.py`` installs a ``ModuleRecorder`` in every rank of each layout it runs, then compares the
layouts module by module to name where two runs part. Recorded in the order they happen on every rank:
``batch.<field>`` (each field of the global batch the model receives, after mixup), ``<module>:out`` (every tensor a
module returns, root model included) and ``<module>:grad`` (the gradient flowing back into each such output).

A fingerprint (shape, sum, sum of absolute values, L2 norm, largest absolute value, an evenly spaced sample) is taken
of the whole global tensor, made ``broadcast`` on its own placement so that no rank outside it takes part. The
placement's lowest rank writes it to ``<dir>/modules_rank<r>.jsonl`` with the sequence number every rank agrees on
(all ranks run every module in global mode).
"""
import json
import os

import numpy as np
import oneflow as flow
from libai.engine.hooks import HookBase

SAMPLE_SIZE = 256


def fingerprint(values):
    """A small summary of a numpy array that two runs can compare."""
    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    if flat.size == 0:
        return {"shape": list(np.shape(values)), "sum": 0.0, "abs": 0.0, "l2": 0.0, "max": 0.0, "sample": []}
    picks = np.linspace(0, flat.size - 1, num=min(SAMPLE_SIZE, flat.size)).astype(np.int64)
    return {"shape": list(np.shape(values)), "sum": float(flat.sum()), "abs": float(np.abs(flat).sum()),
            "l2": float(np.sqrt((flat * flat).sum())), "max": float(np.abs(flat).max()),
            "sample": flat[picks].tolist()}


def difference(a, b):
    """``(relative, absolute)`` size of the difference between two fingerprints (inf if shapes differ)."""
    if a["shape"] != b["shape"]:
        return float("inf"), float("inf")
    sample = np.abs(np.asarray(a["sample"]) - np.asarray(b["sample"]))
    absolute = max(float(sample.max()) if sample.size else 0.0, abs(a["max"] - b["max"]))
    scale = max(a["max"], b["max"], 1e-30)
    moments = max(abs(a["sum"] - b["sum"]) / max(a["abs"], b["abs"], 1e-30),
                  abs(a["l2"] - b["l2"]) / max(a["l2"], b["l2"], 1e-30))
    return max(absolute / scale, moments), absolute


def _whole_on_writer(tensor):
    """The full value of ``tensor`` as numpy on the rank that writes it, None elsewhere."""
    if not tensor.is_global:
        return tensor.detach().float().numpy() if flow.env.get_rank() == 0 else None
    placement = tensor.placement
    replicated = [flow.sbp.broadcast] * len(tensor.sbp)
    whole = tensor.detach().to_global(placement=placement, sbp=replicated)
    if flow.env.get_rank() != int(placement.ranks.min()):
        return None
    return whole.to_local().float().numpy()


def _tensors(value, path=""):
    """``(path, tensor)`` for every tensor in a module's output (tensors, tuples, lists, dicts)."""
    if isinstance(value, flow.Tensor):
        yield path, value
    elif isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            yield from _tensors(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _tensors(item, f"{path}.{key}")


class ModuleRecorder(HookBase):
    """Forward/gradient fingerprints of every module of ``trainer.model`` (a LiBai hook)."""

    def __init__(self, output_dir):
        self.path = os.path.join(output_dir, f"modules_rank{flow.env.get_rank()}.jsonl")
        self.iteration = None
        self.sequence = 0
        self.calls = {}
        self.pending = []

    def attach(self, trainer):
        """Hook every module of the trainer's model and register this recorder as a trainer hook."""
        for name, module in trainer.model.named_modules():
            module.register_forward_hook(self._forward_hook(name or "model"))
        trainer.register_hooks([self])

    def before_step(self):
        self.iteration = self.trainer.iter
        self.sequence = 0
        self.calls = {}

    def after_step(self):
        if self.pending:
            with open(self.path, "a") as f:
                f.writelines(json.dumps(record) + "\n" for record in self.pending)
        self.pending = []
        self.iteration = None

    def record(self, name, tensor):
        """Fingerprint ``tensor`` under ``name`` (called on every rank, in the same order)."""
        if self.iteration is None:
            return
        self.sequence += 1
        values = _whole_on_writer(tensor)
        if values is not None:
            self.pending.append({"iteration": self.iteration, "seq": self.sequence, "name": name,
                                 **fingerprint(values)})

    def record_batch(self, batch):
        for field, tensor in sorted(batch.items()):
            if isinstance(tensor, flow.Tensor):
                self.record(f"batch.{field}", tensor)
        return batch

    def _forward_hook(self, name):
        def hook(module, inputs, output):
            if self.iteration is None:
                return
            call = self.calls[name] = self.calls.get(name, -1) + 1
            label = name if call == 0 else f"{name}#{call}"
            for path, tensor in _tensors(output):
                self.record(f"{label}{path}:out", tensor)
                if tensor.requires_grad:
                    tensor.register_hook(self._grad_hook(f"{label}{path}:grad"))
        return hook

    def _grad_hook(self, name):
        def hook(grad):
            self.record(name, grad)
        return hook


def recording_batches(trainer_cls, recorder):
    """A subclass of ``trainer_cls`` whose ``get_batch`` also records the batch it returns."""

    class Recording(trainer_cls):
        @classmethod
        def get_batch(cls, *args, **kwargs):
            return recorder.record_batch(super().get_batch(*args, **kwargs))

    Recording.__name__ = Recording.__qualname__ = trainer_cls.__name__
    Recording.__module__ = trainer_cls.__module__
    return Recording


def read_records(output_dir):
    """``{iteration: [record, ...]}`` merged from every rank's file, in the order they happened."""
    by_iteration = {}
    names = sorted(n for n in os.listdir(output_dir) if n.startswith("modules_rank") and n.endswith(".jsonl"))
    for name in names:
        with open(os.path.join(output_dir, name)) as f:
            for line in f:
                record = json.loads(line)
                by_iteration.setdefault(record["iteration"], []).append(record)
    for records in by_iteration.values():
        records.sort(key=lambda r: r["seq"])
    return by_iteration


def record_every_trainer():
    """Make every LiBai trainer this process trains afterwards (``DefaultTrainer`` or a subclass, whatever script built
    it: ``libai-ext-check-equivalence --script``) write its raw losses and, in eager mode, a ``ModuleRecorder``'s
    records into its output folder, as ``libai-ext-train``'s runs under the tool do."""
    from libai.engine import DefaultTrainer

    from ..compat.patching import replace
    from .hooks import RawLossWriter

    train = DefaultTrainer.train

    def recorded_train(self):
        if not getattr(self, "_libai_ext_recorded", False):
            self._libai_ext_recorded = True
            output_dir = self.cfg.train.output_dir
            if not any(isinstance(hook, RawLossWriter) for hook in self._hooks):
                self.register_hooks([RawLossWriter(output_dir)])
            if not self.cfg.graph.enabled:  # graph modules cannot take eager hooks: losses only
                recorder = ModuleRecorder(output_dir)
                get_batch = self.get_batch
                self.get_batch = lambda *args, **kwargs: recorder.record_batch(get_batch(*args, **kwargs))
                recorder.attach(self)
        return train(self)

    replace(DefaultTrainer, "train", recorded_train,
            "libai-ext-check-equivalence --script: the trainers a project's script builds record their modules",
            patch="script_recording")
