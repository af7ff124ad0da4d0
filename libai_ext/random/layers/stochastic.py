"""Dropout and DropPath whose masks follow the SBP of their input (docs/randomness.md#dropout-and-drop-path).

Drop-ins for ``flow.nn.Dropout`` / ``libai.layers.DropPath`` on any global tensor (``P`` included) or local one:
replicas draw the same mask, shards their part of one global mask, with no communication and no per-rank seeds.
``train.randomness`` (or a layer's ``randomness``) picks ``"layout_invariant"`` (``counter_rng``: each element's bits
from its global position) or ``"fast"`` (``shard_rng``: OneFlow's kernel seeded per shard; same layout only).

A layer's stream is its qualified name once ``name_stochastic_layers(model)`` ran (the trainer does), else its
construction order.  ``train.seed`` itself keys it (never the per-scope seed), so replicas agree under every
``train.seed_scope``; outside the trainer's micro-steps the ``c``-th call draws ``(c, 0)``.  A graph that takes the
step (``engine.graph.StepFedGraph``) draws eager "layout_invariant" masks in both modes (``_drop_traced`` says why);
a layer traced in any other graph is refused by name (``graph_calls.UnkeyedGraphDraw``).

As OneFlow's dropout kernel: the output is ``x * m``, ``m`` in ``x``'s dtype holding the scale where kept and 0 where
dropped, so a kept element is ``x`` times the scale rounded to ``x``'s dtype and a dropped one ``x * 0`` (a signed
zero, NaN for an infinite ``x``).  The scale is ``1.0f / (1.0f - rate)`` in float32 (``DropPath``: LiBai's
``1 / (1 - p)`` with ``1 - p`` rounded to float32 first).  Autograd keeps the 1-byte mask for backward
(``_scale_kept``), not ``m``.
"""
import functools
import itertools

import numpy as np
import oneflow as flow
from oneflow import nn
from oneflow.nn.graph.proxy import ProxyModule

from .. import draws, keyed_op, modes
from ..counter_rng import GPU_LAUNCH_BYTES, call_keys, keep_level, keep_mask, local_keep_mask, stream_words
from ..global_index import mask_layout, replicated
from ..shard_rng import local_device, shard_coordinates, shard_generator
from . import graph_calls

_construction_order = itertools.count()
_native_dropout = flow._C.dropout  # (``stochastic_ops`` routes the public name to the layers)


def dropout_scale(rate):
    """What OneFlow's dropout kernel multiplies kept elements by: ``1.0f / (1.0f - rate)`` in
    float32, 0 at ``rate = 1``."""
    one = np.float32(1.0)
    return float(one / (one - np.float32(rate))) if rate < 1.0 else 0.0


def drop_path_scale(rate):
    """What LiBai's ``DropPath`` multiplies kept samples by: ``1 / keep_prob`` in float32 (its mask
    divided by the Python float ``1 - drop_prob``), 0 at ``drop_prob = 1``."""
    return float(np.float32(1.0) / np.float32(1.0 - rate)) if rate < 1.0 else 0.0


# Elements per launch when an eager call applies an element-wise mask: ``m`` never exists whole, so a
# call's peak is its output and the 1-byte mask (as OneFlow's kernel) plus one chunk's temporaries (at most four
# float32 tensors of it; on GPUs within ``GPU_LAUNCH_BYTES``), whatever the tensor's size.
APPLY_CHUNK = {"cpu": 2 ** 18, "cuda": GPU_LAUNCH_BYTES // 16}


def _masked(x, keep, scale):
    """``x * m``, ``m`` in ``x``'s dtype: ``scale`` (rounded to that dtype) where ``keep``, else 0."""
    if x.is_lazy or tuple(keep.shape) != tuple(x.shape):
        return x * (keep.to(x.dtype) * scale)
    local_x = x.to_local() if x.is_global else x
    chunk = APPLY_CHUNK.get(local_x.device.type) or max(APPLY_CHUNK.values())
    if local_x.numel() <= chunk:
        return x * (keep.to(x.dtype) * scale)
    out = flow.empty_like(x)
    flat_x, flat_keep, flat_out = (
        (t.to_local() if t.is_global else t).reshape(-1) for t in (x, keep, out))  # views of local data
    for part in apply_chunks(flat_x.shape[0], chunk):
        flat_out[part] = flat_x[part] * (flat_keep[part].to(x.dtype) * scale)
    return out


def runs_keyed_op(x, mask_shape):
    """Whether a call masks ``x`` with the keyed-dropout op (``random.keyed_op``): an element-wise mask, traced in a
    graph (any device) or eager off the CPU (eager CPU ranks run the host loop), where the op has a kernel for x."""
    if mask_shape is not None:
        return False
    device = x.placement.type if x.is_global else x.device.type
    return (x.is_lazy or device != "cpu") and keyed_op.serves(x)


def apply_chunks(elements, chunk):
    """The eager apply step's launches over ``elements`` flat positions: slices of at most ``chunk``."""
    return [slice(start, min(start + chunk, elements)) for start in range(0, elements, chunk)]


@functools.lru_cache(maxsize=None)
def _scale_kept(scale):
    """An autograd function ``(x, keep) -> _masked(x, keep, scale)`` that saves only ``keep`` (1 byte an
    element) for backward and rebuilds ``m`` there, as OneFlow's dropout keeps its bool mask."""

    class ScaleKept(flow.autograd.Function):
        @staticmethod
        def forward(ctx, x, keep):
            ctx.save_for_backward(keep)
            return _masked(x, keep, scale)

        @staticmethod
        def backward(ctx, dy):
            keep, = ctx.saved_tensors
            return _masked(dy, keep, scale), None

    return ScaleKept


def apply_keep(x, keep, scale):
    """``x`` with the bool mask ``keep`` applied (dropped: ``x * 0``; kept: ``x * scale``), laid out
    like ``x`` or broadcastable to it; eager or traced."""
    return _scale_kept(float(scale)).apply(x, keep)


class _CounterStream(nn.Module):
    """Drops what a mask drawn from this layer's stream says, scaling the rest."""

    def __init__(self, rate, layer_idx, randomness, what):
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"{what} must be in [0, 1], got {rate}")
        super().__init__()
        self.rate = rate
        self.randomness = None if randomness is None else modes.check_randomness(randomness, "randomness")
        self.stream = f"#{next(_construction_order)}"
        self.layer_idx = layer_idx
        self.scale = dropout_scale(rate)  # what kept elements are multiplied by
        self._own_calls = 0  # outside a step: the c-th call draws (c, 0)

    def _own_step(self):
        """The step of a call outside the trainer's micro-steps: ``(c, 0)`` for the ``c``-th such call."""
        self._own_calls += 1
        return draws.Step(self._own_calls - 1)

    def forward(self, x, mask_shape=None, mask_sbp=None):
        """``x`` with a mask of ``mask_shape`` (default: x's) applied, in training only."""
        if not self.training or self.rate == 0.0:
            return x
        if x.is_lazy:
            return self._drop_traced(x, mask_shape, mask_sbp)
        step = draws._current or self._own_step()
        call = step.next_call(self)
        keys = call_keys(stream_words(step.seed, self.stream), step.hashed, call)
        if (self.randomness or step.mode) == "fast":
            return self._drop_native(x, step, call, mask_shape, mask_sbp)
        if runs_keyed_op(x, mask_shape):
            return self._keyed_op(x, keys, step)
        shape = tuple(mask_shape or x.shape)
        if not x.is_global:
            keep = local_keep_mask(shape, (0,) * len(shape), shape, keys, self.rate, x.device, step.rows)
            return _scale_kept(self.scale).apply(x, keep)
        # This rank's slice (one host loop on CPU, local ops elsewhere), written into the local part of a global
        # mask laid out like x (``P`` read as ``B``): no communication, whatever the placement.
        sbp, box = mask_layout(shape, x.placement, tuple(mask_sbp or x.sbp))
        keep = flow.empty(shape, dtype=flow.bool, placement=x.placement, sbp=sbp)
        if box is not None:
            target = keep.to_local()
            local = local_keep_mask(shape, *box, keys, self.rate, target.device, step.rows)
            if local.shape != target.shape:
                raise RuntimeError(f"{type(self).__name__}: shard {tuple(local.shape)} computed for sbp {sbp} "
                                   f"on {x.placement}, OneFlow holds {tuple(target.shape)}")
            flow._C.assign_local_tensor(target, local)
        return _scale_kept(self.scale).apply(x, keep)

    drop = forward  # (what ``DropPath.forward`` and the routed functional ops call)

    def _drop_traced(self, x, mask_shape, mask_sbp):
        """Inside ``nn.Graph`` (``self`` is then OneFlow's proxy of the layer): the counter-based mask in both modes
        (the keyed-dropout op where it serves).  OneFlow 0.9.0's graph dropout ignores its generator (measured: every
        graph dropout draws one mask sequence, whatever the seeds), so "fast" has no per-shard stream there."""
        layer = self.to(nn.Module) if isinstance(self, ProxyModule) else self
        step, call = graph_calls.traced_draw(layer, x, name=f"{type(layer).__name__} {layer.stream!r}")
        keys = call_keys(stream_words(step.seed, layer.stream), step.hashed, call)
        if runs_keyed_op(x, mask_shape):
            return self._keyed_op(x, keys, step)
        shape = tuple(mask_shape or x.shape)
        sbp = replicated(tuple(mask_sbp or x.sbp)) if x.is_global else None
        keep = keep_mask(shape, self.rate, keys, x.placement if x.is_global else None, sbp,
                         None if x.is_global else x.device, step.rows)
        return apply_keep(x, keep, self.scale)

    def _keyed_op(self, x, keys, step):
        """Mask and apply in one pass (the bits and gradient of ``local_keep_mask`` and ``apply_keep``)."""
        micro = step.rows.micro if step.rows is not None else 0
        return keyed_op.keyed_dropout(x, keys, keep_level(self.rate), self.scale, micro)

    def _drop_native(self, x, step, call, mask_shape, mask_sbp):
        coordinates = shard_coordinates(x.placement, mask_sbp or x.sbp) if x.is_global else ()
        generator = shard_generator(local_device(x), step.seed, self.stream, (step.step, call), coordinates)
        partial = x.is_global and flow.sbp.partial_sum in x.sbp
        native_scale = dropout_scale(self.rate)
        if mask_shape is None and not partial and self.scale == native_scale:  # the fused kernel, on x
            return _native_dropout(x, self.rate, True, False, generator)
        # A mask of ones through the same kernel: per-sample masks, and partial sums
        # (dropout's own sbp rules would reduce a P input first).
        shape = mask_shape or x.shape
        if x.is_global:
            ones = flow.ones(shape, dtype=x.dtype, placement=x.placement, sbp=replicated(mask_sbp or x.sbp))
        else:
            ones = flow.ones(shape, dtype=x.dtype, device=x.device)
        factor = self.scale / native_scale if native_scale else 0.0
        return x * (_native_dropout(ones, self.rate, True, False, generator) * factor)


class Dropout(_CounterStream):
    """Element-wise dropout: zeroes each element with probability ``p``, scales the rest by 1/(1-p).

    ``randomness``: ``"layout_invariant"`` or ``"fast"``; None (default) follows ``train.randomness``.
    """

    def __init__(self, p=0.5, *, layer_idx=0, randomness=None):
        super().__init__(p, layer_idx, randomness, "Dropout probability p")
        self.p = p

    def extra_repr(self):
        return f"p={self.p}, layer_idx={self.layer_idx}"


class DropPath(_CounterStream):
    """Stochastic depth: drops a whole sample's residual branch with probability ``drop_prob``;
    kept samples are scaled by 1/(1 - drop_prob) unless ``scale_by_keep=False`` (LiBai main's option)."""

    def __init__(self, drop_prob=0.0, *, layer_idx=0, randomness=None, scale_by_keep=True):
        super().__init__(drop_prob, layer_idx, randomness, "DropPath drop_prob")
        self.drop_prob = drop_prob
        self.scale = drop_path_scale(drop_prob) if scale_by_keep else 1.0

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
