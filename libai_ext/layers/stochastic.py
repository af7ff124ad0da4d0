"""Dropout and DropPath whose masks follow the SBP of their input.

Drop-ins for ``flow.nn.Dropout`` / ``libai.layers.DropPath``: any global tensor (any
placement, hierarchy and sbp, ``P`` included) or local tensor on any device.  Replicas
(``B``, ``P``) draw the same mask, shards (``S``) independent ones, with no communication and
no per-rank seeds.  Two ways, chosen by ``train.randomness`` (``seed_everything(...,
randomness=...)``) or per layer:

* ``"layout_invariant"`` (``counter_rng``): each element's mask is a hash of its *global*
  position, so the same seed gives the same global mask on 1 rank and on (2, 2, 2);
* ``"fast"`` (``shard_rng``): OneFlow's native dropout kernel, its generator seeded per
  shard; reproducible on the same layout only.

Each layer's stream is keyed by ``(train.seed, stream name, call counter)``:

* ``train.seed`` itself (``seed_everything`` sets it), never the per-scope seed, so replicas
  agree under every ``train.seed_scope``;
* the stream name is the module's qualified name once ``name_stochastic_layers(model)`` ran
  (the trainer does it), otherwise its construction order;
* the call counter is counted on the host and written to an int64 *buffer* whenever a state
  dict is taken, so checkpoints save it and a resumed run draws the same masks.  Inside
  ``libai_ext.engine.GraphBase`` the counter is an input of the graph (``graph_calls``), so
  graph steps draw the masks eager "layout_invariant" steps draw, in both modes ("fast" is
  eager-only: see ``_drop_traced``).  In any other ``nn.Graph`` the counter is frozen at trace
  time: every step repeats one mask (a warning says so).
"""
import itertools
import logging

import oneflow as flow
from libai.utils import distributed as dist
from oneflow import nn
from oneflow.nn.graph.proxy import ProxyModule

from ..random import modes
from ..random.counter_rng import (
    call_keys, keep_mask, keep_threshold, local_counter_bits, shard_box, stream_keys, stream_words,
)
from ..random.shard_rng import local_device, shard_coordinates, shard_generator
from . import graph_calls

logger = logging.getLogger(__name__)

_construction_order = itertools.count()

def _replicated(sbp):
    return [flow.sbp.broadcast if s == flow.sbp.partial_sum else s for s in sbp]


class _CounterStream(nn.Module):
    """Drops what a mask drawn from this layer's stream says, scaling the rest."""

    def __init__(self, rate, layer_idx, randomness, what):
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"{what} must be in [0, 1), got {rate}")
        super().__init__()
        self.rate = rate
        self.randomness = None if randomness is None else modes.check_randomness(randomness, "randomness")
        self.stream = f"#{next(_construction_order)}"
        self.layer_idx = layer_idx
        replicated = dist.get_nd_sbp([flow.sbp.broadcast, flow.sbp.broadcast])
        self.register_buffer("calls", flow.zeros((), dtype=flow.int64, sbp=replicated,
                                                 placement=dist.get_layer_placement(layer_idx)))
        self._host_calls = 0
        self._reread_calls = False

    def _save_to_state_dict(self, *args, **kwargs):
        if not self._reread_calls:  # (a buffer loaded but not yet read is current already)
            self.calls.fill_(self._host_calls)
        super()._save_to_state_dict(*args, **kwargs)

    def _load_from_state_dict(self, *args, **kwargs):
        super()._load_from_state_dict(*args, **kwargs)
        self._reread_calls = True  # from the loaded buffer, at the next call

    def current_calls(self):
        """The number of the next call, counted on the host (a device op per call would cost
        more than the fast mode's whole overhead); the buffer gets it when a state dict is taken."""
        if self._reread_calls:
            self._reread_calls = False
            calls = self.calls
            if calls.is_global:
                # Every rank reads it, those outside the buffer's placement too (a 0-d tensor's
                # local part there is uninitialised memory): a graph's counters input is
                # replicated from one rank, and every rank must agree on it.
                everywhere = flow.env.all_device_placement(calls.placement.type)
                calls = calls.to_global(placement=everywhere, sbp=flow.sbp.broadcast).to_local()
            self._host_calls = int(calls.item())
        return self._host_calls

    def advance_calls(self, count):
        """Count ``count`` calls made elsewhere (a graph's steps, see ``graph_calls``)."""
        self._host_calls = self.current_calls() + count

    def _next_call(self):
        call = self.current_calls()
        self._host_calls += 1
        return call

    def drop(self, x, mask_shape=None, mask_sbp=None):
        """``x`` with a mask of ``mask_shape`` (default: x's) applied, in training only."""
        if not self.training or self.rate == 0.0:
            return x
        if x.is_lazy:
            return self._drop_traced(x, mask_shape, mask_sbp)
        call = self._next_call()
        if (self.randomness or modes.randomness()) == "fast":
            return self._drop_native(x, call, mask_shape, mask_sbp)
        return x * self._counter_mask(x, tuple(mask_shape or x.shape), mask_sbp or (x.sbp if x.is_global else None),
                                      stream_keys(modes.layer_seed(), self.stream, call))

    def _drop_traced(self, x, mask_shape, mask_sbp):
        """Inside ``nn.Graph`` (``self`` is then OneFlow's proxy of the layer): the counter-based
        mask in both modes.  OneFlow 0.9.0's graph dropout ignores the generator it is given
        (measured: every dropout of every graph draws one mask sequence, whatever the seeds and
        ``flow.manual_seed``), so "fast" has no per-layer, per-shard stream there."""
        layer = self.to(nn.Module) if isinstance(self, ProxyModule) else self
        counter, _ = graph_calls.traced_counter(layer, x)
        if counter is None:
            logger.warning(f"{type(layer).__name__} {layer.stream!r} traced outside libai_ext's GraphBase: "
                           "its call counter is frozen, every step of this graph draws the same mask")
            keys = stream_keys(modes.layer_seed(), layer.stream, layer._host_calls)
        else:
            keys = call_keys(stream_words(modes.layer_seed(), layer.stream), counter)
        shape = tuple(mask_shape or x.shape)
        sbp = _replicated(mask_sbp or x.sbp) if x.is_global else None
        mask = keep_mask(shape, self.rate, keys, x.placement if x.is_global else None, sbp,
                         None if x.is_global else x.device)
        return x * (mask.to(x.dtype) * (1.0 / (1.0 - self.rate)))

    def _counter_mask(self, x, shape, sbp, keys):
        """0 or 1/(1-p) per element, laid out like ``x`` (``P`` read as ``B``)."""
        scale = 1.0 / (1.0 - self.rate)
        if not x.is_global:
            return keep_mask(shape, self.rate, keys, device=x.device).to(x.dtype) * scale
        sbp = _replicated(sbp)
        # Eager: this rank's slice from local ops (cheaper to launch), written into the local
        # part of a global tensor: no communication, whatever the placement.
        mask = flow.empty(shape, dtype=x.dtype, placement=x.placement, sbp=sbp)
        box = shard_box(shape, x.placement, sbp)
        if box is not None:
            target = mask.to_local()
            bits = local_counter_bits(shape, *box, keys, device=target.device)
            if tuple(bits.shape) != tuple(target.shape):
                raise RuntimeError(f"{type(self).__name__}: shard {tuple(bits.shape)} computed for sbp {sbp} "
                                   f"on {x.placement}, OneFlow holds {tuple(target.shape)}")
            flow._C.assign_local_tensor(target, (bits >= keep_threshold(self.rate)).to(x.dtype) * scale)
        return mask

    def _drop_native(self, x, call, mask_shape, mask_sbp):
        coordinates = shard_coordinates(x.placement, mask_sbp or x.sbp) if x.is_global else ()
        generator = shard_generator(local_device(x), modes.layer_seed(), self.stream, call, coordinates)
        partial = x.is_global and flow.sbp.partial_sum in x.sbp
        if mask_shape is None and not partial:  # the fused kernel, on x itself
            return flow._C.dropout(x, self.rate, True, False, generator)
        # A mask of ones through the same kernel: per-sample masks, and partial sums
        # (dropout's own sbp rules would reduce a P input first).
        shape = mask_shape or x.shape
        if x.is_global:
            ones = flow.ones(shape, dtype=x.dtype, placement=x.placement, sbp=_replicated(mask_sbp or x.sbp))
        else:
            ones = flow.ones(shape, dtype=x.dtype, device=x.device)
        return x * flow._C.dropout(ones, self.rate, True, False, generator)


class Dropout(_CounterStream):
    """Element-wise dropout: zeroes each element with probability ``p``, scales the rest by 1/(1-p).

    ``randomness``: ``"layout_invariant"`` or ``"fast"``; None (default) follows ``train.randomness``.
    """

    def __init__(self, p=0.5, *, layer_idx=0, randomness=None):
        super().__init__(p, layer_idx, randomness, "Dropout probability p")
        self.p = p

    def forward(self, x):
        return self.drop(x)

    def extra_repr(self):
        return f"p={self.p}, layer_idx={self.layer_idx}"


class DropPath(_CounterStream):
    """Stochastic depth: drops a whole sample's residual branch with probability ``drop_prob``."""

    def __init__(self, drop_prob=0.0, *, layer_idx=0, randomness=None):
        super().__init__(drop_prob, layer_idx, randomness, "DropPath drop_prob")
        self.drop_prob = drop_prob

    def forward(self, x):
        # One value per sample: only splits of the batch dim apply to the mask.
        sbp = [s if s == flow.sbp.split(0) else flow.sbp.broadcast for s in x.sbp] if x.is_global else None
        return self.drop(x, (x.shape[0],) + (1,) * (x.ndim - 1), sbp)

    def extra_repr(self):
        return f"drop_prob={self.drop_prob}, layer_idx={self.layer_idx}"


def stochastic_layers(model):
    """The model's Dropout / DropPath modules, each once, in ``modules()`` order."""
    return [module for module in model.modules() if isinstance(module, _CounterStream)]


def name_stochastic_layers(model):
    """Key each stochastic layer's stream by its qualified name (stable across code changes
    that add layers elsewhere); returns the names."""
    names = []
    for name, module in model.named_modules():
        if isinstance(module, _CounterStream):
            module.stream = name
            names.append(name)
    return names
