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
    """Drops what a mask drawn from this layer's counter-based stream says, scaling the rest."""

    def __init__(self, rate, layer_idx, what):
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"{what} must be in [0, 1), got {rate}")
        super().__init__()
        self.rate = rate
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

    def drop(self, x, mask_shape=None, mask_sbp=None):
        """``x`` with a mask of ``mask_shape`` (default: x's) applied, in training only."""
        if not self.training or self.rate == 0.0:
            return x
        shape = mask_shape or x.shape
        values = self.uniform(shape, x.placement, mask_sbp or x.sbp) if x.is_global else self.uniform(shape)
        return x * (values >= self.rate).to(x.dtype) / (1.0 - self.rate)


class Dropout(_CounterStream):
    """Element-wise dropout: zeroes each element with probability ``p``, scales the rest by 1/(1-p)."""

    def __init__(self, p=0.5, *, layer_idx=0):
        super().__init__(p, layer_idx, "Dropout probability p")
        self.p = p

    def forward(self, x):
        return self.drop(x)

    def extra_repr(self):
        return f"p={self.p}, layer_idx={self.layer_idx}"


class DropPath(_CounterStream):
    """Stochastic depth: drops a whole sample's residual branch with probability ``drop_prob``."""

    def __init__(self, drop_prob=0.0, *, layer_idx=0):
        super().__init__(drop_prob, layer_idx, "DropPath drop_prob")
        self.drop_prob = drop_prob

    def forward(self, x):
        # One value per sample: only splits of the batch dim apply to the mask.
        sbp = [s if s == flow.sbp.split(0) else flow.sbp.broadcast for s in x.sbp] if x.is_global else None
        return self.drop(x, (x.shape[0],) + (1,) * (x.ndim - 1), sbp)

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
