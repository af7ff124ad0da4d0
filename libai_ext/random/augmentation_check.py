"""The check by effect of keyed augmentation: a sample read again after every generator was disturbed must not change.

Keyed augmentation (``random.keyed_dataset``) cannot key what it cannot see: a generator the attribute walk does not
reach, OneFlow's op held by a reference taken before libai_ext's wrappers were installed, numbers from the clock or
the OS.  So instead of trusting the names a dataset calls, ``AugmentationCheck`` reads one sample of a batch again
with the same keys after python's, numpy's, OneFlow's and the owned generators' states were moved elsewhere; a
difference is refused (``UnkeyedAugmentationError``) or warned about.  The culprit is found by tracing the dataset's
``transform`` and every transform it holds (a ``Compose``'s list, RandAugment's ops, a two-crop wrapper's Composes)
over two more reads: the innermost call that got the same input in both and gave different outputs, before the reads
part ways.  When it runs and its config keys: docs/data_order.md#the-check-by-effect.
"""
import hashlib
import logging
import random
import types

import numpy as np
import oneflow as flow
from PIL import Image

from .owned_generators import reseed
from .keyed_dataset import finish_queued_work, preserved_streams

logger = logging.getLogger(__name__)
ACTIONS = ("refuse", "warn", "off")
KEY = "train.augmentation_check"
DEFAULTS = dict(action="refuse", first_batches=2, period=50)
_MAX_DEPTH = 6  # transforms nested in transforms
_DISTURBANCES = (0x5EED1, 0x5EED2)  # two unrelated states for the generators between the two reads


class UnkeyedAugmentationError(RuntimeError):
    """A sample read twice with the same keys differed: part of its augmentation is not keyed per sample."""


class AugmentationCheck:
    """When to check (``first_batches``, then every ``period``-th batch; ``KeyedAugmentation._verify`` counts the
    ``reads``) and what to do about a difference (``action``)."""

    def __init__(self, action=DEFAULTS["action"], first_batches=DEFAULTS["first_batches"],
                 period=DEFAULTS["period"]):
        if action not in ACTIONS:
            raise ValueError(f"{KEY}.action={action!r}: expected one of {', '.join(map(repr, ACTIONS))}")
        for name, value in (("first_batches", first_batches), ("period", period)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{KEY}.{name}={value!r}: expected an int >= 0")
        self.action, self.first_batches, self.period = action, first_batches, period
        self.reads = 0  # batches this process read (each loader worker counts its own)
        self._warned = set()

    @classmethod
    def from_config(cls, cfg):
        from libai.config import try_get_key

        values = {name: try_get_key(cfg, f"{KEY}.{name}", default=default) for name, default in DEFAULTS.items()}
        check = cls(**values)
        return None if check.action == "off" else check

    def verify(self, keyed, batch, epoch, samples, oneflow):
        """Read one sample of ``batch`` again after disturbing every generator; act on a difference."""
        position = (self.reads - 1) % len(samples)
        index = batch[position]
        with preserved_streams(oneflow=True):  # the caller's streams, disturbed here, as they were
            again = read_disturbed(keyed, epoch, index, oneflow, _DISTURBANCES[0])
            if fingerprint(again) == fingerprint(samples[position]):
                return
            culprit = find_culprit(keyed, epoch, index, oneflow)
        self.act(f"{KEY}: sample {index} of epoch {epoch}, read again with the same keys after python's, numpy's "
                 f"and OneFlow's generators (and those the dataset owns) were moved elsewhere, came out different",
                 culprit)

    def unreported_oneflow_draw(self, keyed, batch, epoch):
        """OneFlow's generator was seen moved by a read that no wrapper reported: name the transform and act."""
        with preserved_streams(oneflow=True):
            culprits = (find_culprit(keyed, epoch, index, oneflow=False, default=None) for index in batch)
            culprit = next((c for c in culprits if c is not None), f"{type(keyed.dataset).__name__}")
        self.act(f"{KEY}: reading a batch of epoch {epoch} drew from OneFlow's CPU generator through a function "
                 f"libai_ext's wrappers of OneFlow's random ops do not see (a reference to OneFlow's own op taken "
                 f"before they were installed): such draws cannot be put in call order with the sample's other "
                 f"draws, and the batches read before this check drew them unkeyed", culprit)

    def act(self, finding, culprit):
        message = (
            f"{finding}: {culprit} draws random numbers that are not keyed per sample, so they depend on the rank, "
            f"the loader worker and what was read before (another layout or a rerun gives other samples). Usual causes: a "
            f"generator held where libai_ext does not look for one (create it in the dataset or its transforms, "
            f"or draw from python random / numpy's global stream / OneFlow's default generator), OneFlow's random op "
            f"held by a reference taken before libai_ext was loaded (a default argument, a closure: call flow.rand "
            f"by its name), numbers from the clock or the OS. {KEY}.action='warn' trains anyway; "
            f"train.randomness='fast' gives up layout-invariant augmentation.")
        if self.action == "refuse":
            raise UnkeyedAugmentationError(message)
        if culprit not in self._warned:
            self._warned.add(culprit)
            logger.warning(message)


def disturb_streams(keyed, salt):
    """Move python's, numpy's and OneFlow's CPU generators and the dataset's own generators to states derived
    from ``salt``, none of them what a sample's keys would set."""
    random.seed(salt * 7919)
    np.random.seed(salt % 2 ** 32)
    finish_queued_work()  # a queued draw reads the generator when it runs
    flow.default_generator.manual_seed(salt)
    for site in keyed.owned_generators:
        reseed(site.resolve(keyed.dataset), salt)


def read_disturbed(keyed, epoch, index, oneflow, salt):
    disturb_streams(keyed, salt)
    return keyed._read(epoch, index, oneflow)


def fingerprint(value):
    """A digest of a sample (or of what a transform returned): tensors, arrays and images by their bytes."""
    digest = hashlib.blake2b(digest_size=16)
    _feed(digest, value, 0)
    return digest.hexdigest()


def _feed(digest, value, depth):
    if isinstance(value, flow.Tensor):
        value = value.numpy()
    if isinstance(value, Image.Image):
        digest.update(f"image {value.mode} {value.size}".encode())
        value = np.asarray(value)
    if isinstance(value, np.ndarray):
        digest.update(f"array {value.dtype} {value.shape}".encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, (list, tuple)):
        digest.update(f"{type(value).__name__} {len(value)}".encode())
        for item in value:
            _feed(digest, item, depth + 1)
    elif isinstance(value, dict):
        digest.update(f"dict {len(value)}".encode())
        for key in sorted(value, key=repr):
            digest.update(repr(key).encode())
            _feed(digest, value[key], depth + 1)
    elif isinstance(value, (type(None), bool, int, float, complex, str, bytes, np.generic)):
        digest.update(repr(value).encode())
    elif depth < _MAX_DEPTH and isinstance(getattr(value, "__dict__", None), dict):
        # LiBai's Instance (its fields), DistTensorData (its tensor and placement), a user's record.
        digest.update(type(value).__name__.encode())
        _feed(digest, vars(value), depth + 1)
    else:
        digest.update(repr(value).encode())


# --- naming the transform -------------------------------------------------------------------------------------------

class _Traced:
    """Stands in for a transform while the sample is read: records (path, input, output) of each call."""

    def __init__(self, transform, path, calls):
        self._transform, self._path, self._calls = transform, path, calls

    def __call__(self, *args, **kwargs):
        call = [self._path, type(self._transform).__name__, fingerprint((args, kwargs)), None]
        self._calls.append(call)
        result = self._transform(*args, **kwargs)
        call[3] = fingerprint(result)
        return result

    def __getattr__(self, name):
        return getattr(self._transform, name)


def _is_transform(value):
    return callable(value) and not isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType,
                                                      types.MethodType, types.ModuleType, _Traced))


def _children(transform):
    """``(attribute, position or None, transform)`` held by ``transform``: lists of transforms (a Compose's,
    RandAugment's ops) and transforms held as attributes (a two-crop wrapper's Composes)."""
    attributes = getattr(transform, "__dict__", None)
    if not isinstance(attributes, dict):
        return
    for name, value in list(attributes.items()):
        if isinstance(value, (list, tuple)) and value and all(_is_transform(v) for v in value):
            yield from ((name, i, v) for i, v in enumerate(value))
        elif _is_transform(value):
            yield name, None, value


def _trace(owner, name, transform, path, calls, undo, depth):
    """Replace ``transform`` (``owner.name``) and what it holds with tracing stand-ins; ``undo`` puts them back."""
    if depth < _MAX_DEPTH:
        by_list = {}
        for attribute, position, child in list(_children(transform)):
            child_path = f"{path}.{attribute}" + ("" if position is None else f"[{position}]")
            traced = _trace(None, None, child, child_path, calls, undo, depth + 1)
            if position is None:
                _replace(transform, attribute, traced, undo)
            else:
                by_list.setdefault(attribute, list(getattr(transform, attribute)))[position] = traced
        for attribute, items in by_list.items():
            original = getattr(transform, attribute)
            _replace(transform, attribute, type(original)(items), undo)
    traced = _Traced(transform, path, calls)
    if owner is not None:
        _replace(owner, name, traced, undo)
    return traced


def _replace(owner, name, value, undo):
    undo.append((owner, name, getattr(owner, name)))
    setattr(owner, name, value)


def _traced_read(keyed, epoch, index, oneflow, salt):
    """The calls of the dataset's transforms while the sample is read after a disturbance, and the sample's
    fingerprint."""
    calls, undo = [], []
    dataset = keyed.dataset
    try:
        if _is_transform(getattr(dataset, "transform", None)):
            _trace(dataset, "transform", dataset.transform, "dataset.transform", calls, undo, 0)
        sample = read_disturbed(keyed, epoch, index, oneflow, salt)
    finally:
        for owner, name, original in reversed(undo):
            setattr(owner, name, original)
    return calls, fingerprint(sample)


def find_culprit(keyed, epoch, index, oneflow, default=""):
    """The transform whose draws are not keyed, as ``path (Class)``: the last call, before the two traced reads
    part ways, that got the same input in both and gave different outputs.  ``default`` (unless "") where the
    two reads agree."""
    (first, first_sample), (second, second_sample) = (
        _traced_read(keyed, epoch, index, oneflow, salt) for salt in _DISTURBANCES)
    culprit = None
    for a, b in zip(first, second):
        if a[:3] != b[:3]:
            break  # a transform chose other children, or got another input: its parent was named already
        if a[3] != b[3]:
            culprit = f"{a[0]} ({a[1]})"
    if len(first) != len(second) and culprit is None and first:
        culprit = f"{first[0][0]} ({first[0][1]})"
    if culprit is None and first_sample == second_sample and default != "":
        return default
    if culprit is None:
        name = type(keyed.dataset).__name__
        culprit = (f"{name}.__getitem__" if first_sample != second_sample else
                   f"{name} (two more reads agreed: a draw whose result depends on timing)")
    return culprit
