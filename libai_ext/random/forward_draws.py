"""Random values drawn inside a model's forward, keyed by position instead of by rank.

What ``layers.random_ops`` draws for OneFlow's random ops in a watched forward, one ``Draw`` per call
(docs/randomness.md, how a call is keyed):

* ``"layout_invariant"``: ``counter_rng``'s bits of each element's global index (``P`` read as ``B``); eager ranks
  write their own box from local ops (no communication), a graph traces global ops from its step input
  (``layers.graph_calls``).  A local tensor is drawn alike on every rank; under data parallelism one whose dim 0 is
  this rank's rows of the micro-batch is keyed by the samples' global positions, and one whose dim 0 is neither
  those rows nor the whole micro-batch is refused (``LayoutDependentDraw``).  Under accumulation a micro-batch dim 0
  is numbered by its place in the step's batch (``global_index.StepRows``); other shapes draw alike in every
  micro-batch, as 1 rank draws them once per step.
* ``"fast"``: OneFlow's kernel with a generator seeded from (``train.seed``, stream, step, call, this rank's shard
  coordinates) (``shard_rng.shard_generator``).
"""
import numpy as np
import oneflow as flow

from . import counter_spec, global_index, modes
from .counter_rng import call_keys, counter_bits, local_counter_bits, stream_words, unit_closed_open, unit_open
from .draws import step_key
from .global_index import StepRows, replicated, shard_box
from .devices import own_cuda_device
from .shard_rng import shard_coordinates, shard_generator


class LayoutDependentDraw(RuntimeError):
    """A draw no key makes the same on every layout (a local tensor that is not this rank's rows)."""


class Layout:
    """Where a drawn tensor lives: ``placement`` and ``sbp`` (global) or ``device`` (local)."""

    def __init__(self, placement=None, sbp=None, device=None):
        self.placement = placement
        self.sbp = None if placement is None else tuple(sbp)
        if placement is None and not isinstance(device, flow.device):
            device = flow.device(device or "cpu")
        self.device = None if placement is not None else device

    @property
    def is_global(self):
        return self.placement is not None

    @classmethod
    def of(cls, tensor):
        return cls(tensor.placement, tensor.sbp) if tensor.is_global else cls(device=tensor.device)

    @classmethod
    def requested(cls, device=None, placement=None, sbp=None):
        """The layout a factory's arguments ask for (OneFlow's defaults: a local CPU tensor)."""
        if placement is None:
            return cls(device=device)
        if sbp is None:
            raise ValueError("a placement needs an sbp")
        return cls(placement, [sbp] if isinstance(sbp, flow.sbp.sbp) else list(sbp))

    def finish(self, tensor):
        """``tensor`` (drawn with ``P`` read as ``B``) in the sbp asked for."""
        if self.is_global and list(tensor.sbp) != list(self.sbp):
            return tensor.to_global(sbp=list(self.sbp))
        return tensor


class Draw:
    """One call's draw: ``stream`` name, ``step`` (an int; None inside a graph, whose ``step_info`` holds the
    step key), ``call``; ``step_info`` the trainer's ``draws.Step`` (None outside a step); ``lazy`` inside
    ``nn.Graph``."""

    def __init__(self, stream, step, call, step_info=None, lazy=False):
        self.stream, self.step, self.call, self.step_info, self.lazy = stream, step, call, step_info, lazy

    def keys(self, k=0):
        """The counter keys of this draw's ``k``-th bit stream (a normal takes two)."""
        info = self.step_info
        seed = modes.layer_seed() if info is None else info.seed
        words = stream_words(seed, self.stream if k == 0 else f"{self.stream}#{k}")
        return call_keys(words, step_key(seed, self.step) if info is None else info.hashed, self.call)

    def _accumulated(self):
        info = self.step_info
        return info is not None and info.micro_batches > 1

    def rows(self, dim0, batch_rows):
        """``StepRows`` when dim 0 holds a micro-batch of an accumulated step, else None."""
        info = self.step_info
        if not self._accumulated() or (info.batch_rows is not None and dim0 != batch_rows):
            return None
        return StepRows(info.micro_batches, info.micro)

    def local_box(self, shape):
        """``(global shape, lo, hi, rows)`` of a local tensor drawn on this rank."""
        info = self.step_info
        data_parallel = 1 if info is None else info.data_parallel
        if data_parallel == 1 or not shape:
            return shape, [0] * len(shape), list(shape), self.rows(shape[0] if shape else 0,
                                                                  info.batch_rows if info else None)
        per_rank = None if info.batch_rows is None else info.batch_rows // data_parallel
        if shape[0] == info.batch_rows:  # the whole batch, held by every rank: drawn alike on each
            return shape, [0] * len(shape), list(shape), self.rows(shape[0], info.batch_rows)
        if shape[0] != per_rank:
            raise LayoutDependentDraw(
                f"a local tensor of shape {tuple(shape)} drawn under data parallelism ({data_parallel} ranks): its "
                f"dim 0 is neither this rank's {per_rank} rows of the batch nor the whole batch's {info.batch_rows}, "
                "so no global position keys it (draw it as a global tensor, e.g. with placement=x.placement, "
                "sbp=x.sbp)")
        first = info.data_parallel_rank * per_rank
        whole = (per_rank * data_parallel,) + tuple(shape[1:])
        return whole, [first] + [0] * (len(shape) - 1), [first + per_rank] + list(shape[1:]), \
            self.rows(whole[0], info.batch_rows)


# ---- "layout_invariant": counter bits of the global index ---------------------------------------------

def host_bits(shape, lo, hi, keys, rows=None):
    """``local_counter_bits`` computed on the host: the specification's permutation (``counter_spec``) on
    numpy words of each element's global index, one vectorised pass instead of a chain of tensor ops
    (the same bits: ``tests/test_random_ops.py``), as an int32 CPU tensor."""
    terms = global_index.slice_terms(shape, lo, hi, rows)
    flat = np.zeros([len(t) for t in terms], dtype=np.int64)
    for d, term in enumerate(terms):
        flat += term.reshape([-1 if i == d else 1 for i in range(len(terms))])
    flat = flat.reshape([int(b) - int(a) for a, b in zip(lo, hi)])
    unsigned = [int(k) & counter_spec.MASK32 for k in keys]
    words = counter_spec.permute((flat & counter_spec.MASK32).astype(np.uint64), unsigned,
                                 (flat >> 32).astype(np.uint64))
    return flow.from_numpy(np.ascontiguousarray(words.astype(np.uint32).view(np.int32)))


def _local_bits(shape, lo, hi, keys, device, rows):
    if device.type == "cpu":
        return host_bits(shape, lo, hi, keys, rows)
    return local_counter_bits(shape, lo, hi, keys, device=device, rows=rows)


def counter_values(draw, shape, layout, dtype, transform, streams=1):
    """``transform(*bit tensors)`` (int32 bits of ``streams`` keyed streams), as ``dtype`` in ``layout``."""
    shape = tuple(int(s) for s in shape)
    info = draw.step_info
    batch_rows = None if info is None else info.batch_rows
    if layout.is_global:
        sbp = replicated(layout.sbp)
        rows = draw.rows(shape[0], batch_rows) if shape else None
        if draw.lazy:
            bits = [counter_bits(shape, draw.keys(k), layout.placement, sbp, rows=rows) for k in range(streams)]
            return layout.finish(transform(*bits).to(dtype))
        out = flow.empty(shape, dtype=dtype, placement=layout.placement, sbp=sbp)
        box = shard_box(shape, layout.placement, sbp)
        if box is not None:  # this rank's box, from local ops, into its part of the global tensor
            target = out.to_local()
            bits = [_local_bits(shape, *box, draw.keys(k), target.device, rows) for k in range(streams)]
            flow._C.assign_local_tensor(target, transform(*bits).to(dtype))
        return layout.finish(out)
    whole, lo, hi, rows = draw.local_box(shape)
    if draw.lazy:
        if tuple(whole) != shape:
            raise LayoutDependentDraw(f"a local tensor of shape {shape} drawn under data parallelism inside nn.Graph")
        bits = [counter_bits(shape, draw.keys(k), device=layout.device, rows=rows) for k in range(streams)]
    else:
        bits = [_local_bits(whole, lo, hi, draw.keys(k), layout.device, rows) for k in range(streams)]
    return transform(*bits).to(dtype)


def uniform(draw, shape, layout, dtype=flow.float32, low=0.0, high=1.0):
    """Uniform values in [low, high) (float32 ``rand`` stays below 1: its 2**-24 floor)."""
    def transform(bits):
        u = unit_closed_open(bits)
        if dtype in (flow.float32, flow.float16, flow.bfloat16):
            u = flow.clamp(u, max=1.0 - 2.0 ** -24)
        return u * (high - low) + low if (low, high) != (0.0, 1.0) else u
    return counter_values(draw, shape, layout, dtype, transform)


def normal(draw, shape, layout, dtype=flow.float32, mean=0.0, std=1.0):
    """Normal values (Box-Muller on two bit streams)."""
    def transform(bits1, bits2):
        z = flow.sqrt(flow.log(unit_open(bits1)) * -2.0) * flow.cos(unit_open(bits2) * (2.0 * np.pi))
        return z * std + mean if (mean, std) != (0.0, 1.0) else z
    return counter_values(draw, shape, layout, dtype, transform, streams=2)


def integers(draw, shape, layout, low, high, dtype=flow.int64):
    """Integers in [low, high) (the 32 bits scaled: bias below (high - low) / 2**32)."""
    span = float(int(high) - int(low))
    return counter_values(draw, shape, layout, dtype,
                          lambda bits: flow.floor(unit_closed_open(bits) * span) + float(low))


def permutation(draw, n, layout, dtype=flow.int64):
    """A uniformly random permutation of ``range(n)``: the order of ``n`` distinct keyed words (the
    counter permutation never repeats a word below 2**32 elements)."""
    whole = Layout(layout.placement, [flow.sbp.broadcast] * len(layout.sbp)) if layout.is_global else layout
    bits = counter_values(draw, (int(n),), whole, flow.int32, lambda bits: bits)
    order = flow.argsort(bits).to(dtype)
    return order.to_global(sbp=list(layout.sbp)) if layout.is_global else order


# ---- "fast": OneFlow's kernel, a generator per shard ------------------------------------------------

def shard_generator_for(draw, layout):
    """The generator of ``draw`` on this rank: seeded from (train.seed, stream, step, call) and this rank's
    coordinates on the split axes (the data-parallel rank for a local tensor under data parallelism)."""
    if layout.is_global:
        coordinates = shard_coordinates(layout.placement, layout.sbp) or ()
        device = "cpu" if layout.placement.type == "cpu" else f"cuda:{own_cuda_device()}"
    else:
        info = draw.step_info
        coordinates = (("data_parallel", info.data_parallel_rank),) if info is not None and \
            info.data_parallel > 1 else ()
        device = "cpu" if layout.device.type == "cpu" else f"{layout.device.type}:{layout.device.index}"
    return shard_generator(device, modes.layer_seed(), draw.stream, (draw.step, draw.call), coordinates)
