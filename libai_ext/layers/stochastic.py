"""Dropout and DropPath whose masks follow the SBP of their input.

Drop-in replacements for ``flow.nn.Dropout`` / ``libai.layers.DropPath``.  Masks come
from ``counter_rng``: identical on replicas (B), independent across shards (S), and
the same global mask for the same seed whatever the layout (1 rank or (2, 2, 2)).
No communication, no per-rank seeds.

Each layer's random stream is keyed by ``(layer seed, stream name, call counter)``:

* the layer seed is ``train.seed`` (``seed_everything`` sets it; never the per-scope seed,
  so replicas agree under every seeding scope),
* the stream name is the module's qualified name once ``name_stochastic_layers(model)``
  ran (the trainer does it), otherwise its construction order,
* the call counter is an int64 *buffer*: it is saved in the model's state dict, so
  checkpoints restore it and a resumed run draws the same masks.
"""
import itertools

import oneflow as flow
from libai.utils import distributed as dist
from oneflow import nn

from .counter_rng import counter_uniform, derive_keys

_layer_seed = 0
_construction_order = itertools.count()


def set_layer_seed(seed):
    """The seed every stochastic layer's stream is derived from (``seed_everything`` calls this)."""
    global _layer_seed
    _layer_seed = int(seed)


def layer_seed():
    return _layer_seed


class _CounterStream(nn.Module):
    def __init__(self, layer_idx):
        super().__init__()
        self.stream = f"#{next(_construction_order)}"
        self.layer_idx = layer_idx
        replicated = dist.get_nd_sbp([flow.sbp.broadcast, flow.sbp.broadcast])
        self.register_buffer("calls", flow.zeros((), dtype=flow.int64, sbp=replicated,
                                                 placement=dist.get_layer_placement(layer_idx)))

    def uniform(self, shape, placement=None, sbp=None):
        """Uniform values for ``shape`` (global with ``placement``/``sbp``); advances the counter."""
        counter = self.calls
        if placement is None:
            counter = counter.to_local()
        elif counter.placement != placement:
            counter = counter.to_global(placement=placement)
        values = counter_uniform(shape, derive_keys(_layer_seed, self.stream), counter, placement, sbp)
        self.calls.add_(1)
        return values

    def uniform_like(self, x, shape=None, sbp=None):
        if not x.is_global:
            return self.uniform(shape or x.shape)
        return self.uniform(shape or x.shape, x.placement, sbp or x.sbp)


class Dropout(_CounterStream):
    """Element-wise dropout: zeroes each element with probability ``p``, scales the rest by 1/(1-p)."""

    def __init__(self, p=0.5, *, layer_idx=0):
        if not 0.0 <= p < 1.0:
            raise ValueError(f"Dropout probability must be in [0, 1), got {p}")
        super().__init__(layer_idx)
        self.p = p

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return x
        keep = (self.uniform_like(x) >= self.p).to(x.dtype)
        return x * keep / (1.0 - self.p)

    def extra_repr(self):
        return f"p={self.p}, layer_idx={self.layer_idx}"


class DropPath(_CounterStream):
    """Stochastic depth: drops a whole sample's residual branch with probability ``drop_prob``."""

    def __init__(self, drop_prob=0.0, *, layer_idx=0):
        if not 0.0 <= drop_prob < 1.0:
            raise ValueError(f"DropPath drop_prob must be in [0, 1), got {drop_prob}")
        super().__init__(layer_idx)
        self.drop_prob = drop_prob

    def forward(self, x):
        if not self.training or self.drop_prob == 0.0:
            return x
        shape = (x.shape[0],) + (1,) * (x.ndim - 1)
        # One value per sample: only splits of the batch dim apply to the mask.
        sbp = [s if s == flow.sbp.split(0) else flow.sbp.broadcast for s in x.sbp] if x.is_global else None
        keep = (self.uniform_like(x, shape, sbp) >= self.drop_prob).to(x.dtype)
        return x * keep / (1.0 - self.drop_prob)

    def extra_repr(self):
        return f"drop_prob={self.drop_prob}, layer_idx={self.layer_idx}"


def name_stochastic_layers(model):
    """Key each stochastic layer's stream by its qualified name (stable across code changes
    that add layers elsewhere); returns the names."""
    names = []
    for name, module in model.named_modules():
        if isinstance(module, _CounterStream):
            module.stream = name
            names.append(name)
    return names
