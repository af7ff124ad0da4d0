"""Where each element sits in its global tensor: the index the counter hash is keyed by.

``keyed_index`` (a whole tensor; global ops with a placement, what ``nn.Graph`` traces) and ``keyed_slice`` (this
rank's box, local ops) return the hash's first step ``x0 = (flat index mod 2**32) * C - a`` as int32, and the high
words ``flat // 2**32`` where the tensor has 2**32 elements or more (else None).

The flat index is never materialised: it is a sum of one small ``arange`` per group of dimensions (a split dimension
alone, unsplit neighbours merged), each scaled by its stride times ``C`` modulo 2**32, so a rank computes only its
part. Partial sums (``P``) are indexed like broadcast. Under gradient accumulation (``StepRows``) row ``j`` of
micro-batch ``m`` is step position ``m * S + j`` (docs/data_order.md): the same bits as 1 rank with the whole batch.
A dim 0 of ``k`` rows a sample (heads or windows folded into the batch, sample-major) is numbered the same way.
"""
import functools

import numpy as np
import oneflow as flow

from .counter_spec import to_signed

_LOW_WORDS = 2 ** 32


class StepRows:
    """Dim 0 of a micro-batch laid out in its step: ``micro_batches`` per step, this one ``micro``
    (an int, or an int32 tensor inside a graph)."""

    def __init__(self, micro_batches, micro):
        self.micro_batches, self.micro = int(micro_batches), micro

    def offset(self, dim0):
        """The step position of row 0 of the micro-batch (int ``micro``)."""
        return int(self.micro) * dim0

    def positions(self, rows, dim0):
        """Step positions of the int32 row indices ``rows`` (tensor ops: a graph's ``micro`` is a tensor)."""
        return rows - self.micro * (-dim0)  # rows + micro * dim0, with only exact int32 ops (no tensor + tensor)


@functools.lru_cache(maxsize=256)
def placement_coordinates(placement):
    """``(hierarchy shape, this rank's coordinates)`` in ``placement``; coordinates None outside it
    (cached: every eager mask asks, and reading ``placement.ranks`` costs a fraction of a ms)."""
    ranks = np.asarray(placement.ranks)
    where = np.argwhere(ranks == flow.env.get_rank())
    return ranks.shape, (tuple(int(c) for c in where[0]) if len(where) else None)


def shard_box(shape, placement, sbp):
    """``(lo, hi)`` per dimension: the slice of a global tensor this rank holds, or None outside
    ``placement``.  OneFlow's nested balanced split: hierarchy axes in order, each splitting the
    current range of its dimension, the first ``size % parts`` parts one longer (measured)."""
    hierarchy, coordinates = placement_coordinates(placement)
    if coordinates is None:
        return None
    lo, hi = [0] * len(shape), list(shape)
    for axis, s in enumerate(sbp):
        for d in range(len(shape)):
            if s == flow.sbp.split(d):
                parts, part = hierarchy[axis], coordinates[axis]
                base, extra = divmod(hi[d] - lo[d], parts)
                lo[d] += part * base + min(part, extra)
                hi[d] = lo[d] + base + (part < extra)
    return lo, hi


@functools.lru_cache(maxsize=1024)
def mask_layout(shape, placement, sbp):
    """``(sbp, box)`` of an eager mask laid out like a global tensor of ``shape`` with ``sbp`` (a tuple): partial
    sums read as broadcast (``replicated``), and this rank's ``shard_box`` (cached: every eager mask asks)."""
    sbp = replicated(sbp)
    return sbp, shard_box(shape, placement, sbp)


def _strides(shape):
    return [int(np.prod(shape[d + 1:], dtype=np.int64)) for d in range(len(shape))]


def _scaled(key, factor):
    """``key * factor`` modulo 2**32, for an int key or an int32 tensor key (never negated:
    unary ``-`` of a tensor is not exact; a factor of 1 adds no op to a graph)."""
    if isinstance(key, int):
        return to_signed(key * factor)
    return key if factor == 1 else key * to_signed(factor)


def _arange(size, **layout):
    """0..size-1 as int32, or int64 past int32 (OneFlow's int32 arange wraps at 2**31)."""
    return flow.arange(size, dtype=flow.int32 if size < 2 ** 31 else flow.int64, **layout)


def _times_key(values, key, factor):
    """``values * key * factor`` modulo 2**32, as int32."""
    if values.dtype == flow.int64:  # wraps modulo 2**64; the cast keeps the low word (measured)
        multiplier = _scaled(key, factor) if isinstance(key, int) else key.to(flow.int64) * factor
        return (values * multiplier).to(flow.int32)
    multiplier = _scaled(key, factor)
    return values if isinstance(multiplier, int) and multiplier == 1 else values * multiplier


def _plus(tensor, constant):
    """``tensor + constant`` (an int), no op for 0."""
    return tensor + constant if constant else tensor


def _view(term, dims, ndim):
    """``term`` over dims ``dims`` (consecutive), shaped to broadcast against ``ndim`` dims; unsqueeze
    (not reshape) keeps a split vector's axis attached to its dimension."""
    for _ in range(dims[0]):
        term = term.unsqueeze(0)
    for _ in range(ndim - dims[-1] - 1):
        term = term.unsqueeze(-1)
    return term


class HighWords:
    """``flat // 2**32`` per element without a whole tensor of it: ``high`` over the outer dims (int32,
    broadcast), plus one where ``carry`` (bool, whole); ``scaled(m)`` is ``hi * m`` modulo 2**32 (what a round
    of the hash subtracts), one ``where`` over two small tensors."""

    def __init__(self, high, carry):
        self.high, self.carry = high, carry

    def scaled(self, multiplier):
        low = self.high * multiplier
        return flow.where(self.carry, _plus(low, multiplier), low)


def _index_sum(vectors, strides, ndim, key=1, offset=0):
    """``(sum of (positions + first) * stride) * key - offset`` modulo 2**32 over the groups ``(dims,
    positions, first)``, int32, broadcast over their dims: the smallest group first (only the last op writes a
    whole tensor), ``- offset`` folded into it, the others subtracted negated (``tensor + tensor`` is not exact);
    a group whose term is its positions (``key * stride`` 1) first, as it costs no op then.  A non-zero ``first``
    takes an int ``key``; an int32 tensor ``key`` or ``offset`` one element."""
    def order(group):
        dims, vector, first = group
        free = isinstance(key, int) and not first and _scaled(key, strides[dims[-1]]) == 1
        return not free, vector.numel()
    total = None
    for dims, vector, first in sorted(vectors, key=order):
        sign = 1 if total is None else -1
        stride = sign * strides[dims[-1]]
        term = _times_key(vector, key, stride)
        constant = to_signed(key * first * stride) if first else 0
        if total is None:
            term = (_plus(term, to_signed(constant - offset)) if isinstance(offset, int)
                    else _plus(term, constant) - offset)
            total = _view(term, dims, ndim)
        else:
            total = total - _view(_plus(term, constant), dims, ndim)
    return total


def _high_words(vectors, strides, shape):
    """``flat // 2**32`` from ``(dims, positions, first position)`` per group (``shape``: the virtual tensor's):
    trailing groups below 2**31 - 1 positions sum exactly in int32 to ``rest``, the others in int64 over their own dims
    to ``outer``; the high word is ``outer``'s, plus one where ``rest`` carries past 2**32 (``HighWords``). With no
    such small trailing group (a dimension of 2**31 positions), the whole flat index in int64."""
    ndim = len(shape)
    inner = next((g for g, (dims, _, _) in enumerate(vectors)
                  if shape[dims[0]] * strides[dims[0]] <= 2 ** 31 - 1), len(vectors))
    outer = None
    for dims, vector, first in vectors[:inner]:
        term = _view((vector.to(flow.int64) + first) * strides[dims[-1]], dims, ndim)
        outer = term if outer is None else outer + term  # int64 tensor + tensor: exact (measured)
    high = outer // _LOW_WORDS
    if inner == len(vectors):
        return high.to(flow.int32)
    # rest < 2**31 - 1: it carries where rest >= 2**32 - low word, never where that is 2**31 - 1 or more
    threshold = flow.clamp((high * _LOW_WORDS - outer) + _LOW_WORDS, max=2 ** 31 - 1).to(flow.int32)
    rest = _index_sum(vectors[inner:], strides, ndim)
    return HighWords(high.to(flow.int32), rest >= threshold)


# ---- whole tensors (global ops, or one local tensor) ---------------------------------------------

def replicated(sbp):
    """``sbp`` with partial-sum axes as broadcast: every part of a partial sum covers the whole tensor, as a
    replica does, so it is drawn (and indexed) like one."""
    out = list(sbp)
    for axis, s in enumerate(out):  # (a loop, not a comprehension: every eager mask asks)
        if s == flow.sbp.partial_sum:
            out[axis] = flow.sbp.broadcast
    return out


def _split_dims(ndim, placement, sbp):
    """Dimensions split into more than one part (a split over one rank is no split)."""
    if placement is None:
        return set()
    hierarchy = np.asarray(placement.ranks).shape
    return {d for axis, s in enumerate(sbp) for d in range(ndim) if s == flow.sbp.split(d) and hierarchy[axis] > 1}


def _dim_groups(ndim, alone):
    """Consecutive dimensions in runs: each dimension of ``alone`` by itself, the others merged."""
    groups, run = [], []
    for d in range(ndim):
        if d in alone:
            groups += [run, [d]] if run else [[d]]
            run = []
        else:
            run.append(d)
    return groups + [run] if run else groups


def _group_vector(shape, group, placement, sbp, device):
    """The flat positions within ``group``'s dims (row-major), split like the group's dim."""
    size = int(np.prod([shape[d] for d in group], dtype=np.int64))
    if placement is None:
        return _arange(size, device=device)
    split = len(group) == 1 and flow.sbp.split(group[0]) in sbp
    vector_sbp = [flow.sbp.split(0) if split and s == flow.sbp.split(group[0]) else flow.sbp.broadcast for s in sbp]
    return _arange(size, placement=placement, sbp=vector_sbp)


def keyed_index(shape, keys, placement=None, sbp=None, device=None, rows=None):
    """``(x0, hi)`` for a whole tensor of ``shape``: global with ``placement``/``sbp``, else local."""
    if not shape:
        x0, hi = keyed_index((1,), keys, placement, sbp, device, rows)
        return x0.reshape(()), hi
    sbp = replicated(sbp) if placement is not None else None
    alone = _split_dims(len(shape), placement, sbp) | ({0} if rows is not None else set())
    groups = _dim_groups(len(shape), alone)
    virtual = (shape[0] * rows.micro_batches,) + shape[1:] if rows is not None else shape
    strides = _strides(virtual)
    vectors = []
    for group in groups:
        vector = _group_vector(shape, group, placement, sbp, device)
        if rows is not None and group == [0]:
            vector = rows.positions(vector, shape[0])
        sizes = [shape[d] for d in group]
        vectors.append((group, vector if len(group) == 1 else vector.reshape(sizes)))
    vectors = [(group, vector, 0) for group, vector in vectors]
    x0 = _index_sum(vectors, strides, len(shape), keys[0], keys[1])
    large = int(np.prod(virtual, dtype=np.int64)) >= _LOW_WORDS
    return x0, (_high_words(vectors, strides, virtual) if large else None)


# ---- this rank's slice, from local ops ------------------------------------------------------------

def _box_runs(shape, lo, hi):
    """Dimensions in runs that are contiguous in the flat index: a run starts at dim 0 or at a
    dimension the box cuts, and takes in the dimensions after it that the box covers whole."""
    runs = []
    for d in range(len(shape)):
        if runs and lo[d] == 0 and hi[d] == shape[d]:
            runs[-1].append(d)
        else:
            runs.append([d])
    return runs


def _slice_index(shape, lo, hi, keys, device, high_words=True):
    """``(x0, hi words)`` of the box ``[lo, hi)`` of a tensor of ``shape`` (int keys; ``high_words`` False: no
    high words, for a caller that knows them constant).

    Each run's elements are consecutive multiples of its last dim's stride, starting at the
    flat position of its first element: one ``arange`` per run."""
    local_shape = [end - start for start, end in zip(lo, hi)]
    strides = _strides(shape)
    C, a = keys[0], keys[1]
    vectors = []  # (dims, positions in units of the last dim's stride, first position in those units)
    for run in _box_runs(shape, lo, hi):
        size = int(np.prod([local_shape[d] for d in run], dtype=np.int64))
        vector = _arange(size, device=device).reshape([local_shape[d] for d in run])
        vectors.append((run, vector, lo[run[0]] * strides[run[0]] // strides[run[-1]]))
    x0 = _index_sum(vectors, strides, len(shape), C, a)
    large = high_words and int(np.prod(shape, dtype=np.int64)) >= _LOW_WORDS
    return x0, (_high_words(vectors, strides, shape) if large else None)


def slice_terms(shape, lo, hi, rows=None):
    """Per dimension, an int64 numpy vector: each local position's contribution to the global flat
    index of the box ``[lo, hi)`` (``rows``: dim 0 numbered by its place in the step), for the host
    kernel (``counter_rng.local_keep_mask``)."""
    shape = tuple(int(s) for s in shape) or (1,)
    lo, hi = ([int(v) for v in lo], [int(v) for v in hi]) if len(lo) else ([0], [1])
    virtual = (shape[0] * rows.micro_batches,) + shape[1:] if rows is not None else shape
    strides = _strides(virtual)
    terms = [np.arange(lo[d], hi[d], dtype=np.int64) * strides[d] for d in range(len(shape))]
    if rows is not None:
        terms[0] += rows.offset(shape[0]) * strides[0]
    return terms


def mask_terms(matrix, lo, hi, rows=None):
    """The host kernel's terms of a mask's box ``[lo, hi)`` (``counter_rng.local_keep_mask``): per
    leading dimension of ``matrix`` (the mask read as ``(leading..., columns)``), each local
    position's contribution to the index of its row's first word (``rows``: dim 0 numbered by its
    place in the step); for the last, the global columns."""
    matrix, lo, hi = tuple(int(s) for s in matrix), [int(v) for v in lo], [int(v) for v in hi]
    words_per_row = (matrix[-1] + 1) // 2
    strides = [stride * words_per_row for stride in _strides(matrix[:-1])]
    terms = [np.arange(lo[d], hi[d], dtype=np.int64) * strides[d] for d in range(len(matrix) - 1)]
    if rows is not None:
        terms[0] += rows.offset(matrix[0]) * strides[0]
    return terms + [np.arange(lo[-1], hi[-1], dtype=np.int64)]


def keyed_slice(shape, lo, hi, keys, device=None, rows=None, high_words=True):
    """``(x0, hi words)`` of this rank's box ``[lo, hi)`` of a global tensor of ``shape`` (``rows``: dim 0
    numbered by its place in the step; ``high_words`` False: hi None, for a caller that knows them constant)."""
    shape, lo, hi = tuple(int(s) for s in shape), [int(v) for v in lo], [int(v) for v in hi]
    if not shape:
        x0, high = keyed_index((1,), keys, device=device)
        return x0.reshape(()), high
    if rows is None:
        return _slice_index(shape, lo, hi, keys, device, high_words)
    virtual = (shape[0] * rows.micro_batches,) + shape[1:]
    offset = rows.offset(shape[0])
    return _slice_index(virtual, [lo[0] + offset] + lo[1:], [hi[0] + offset] + hi[1:], keys, device, high_words)
