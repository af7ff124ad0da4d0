"""Where each element sits in its global tensor: the index the counter hash is keyed by.

``keyed_index`` (a whole tensor, global ops when it has a placement: what ``nn.Graph`` traces)
and ``keyed_slice`` (this rank's box of a global tensor, from local ops) both return the first
step of the hash, ``x0 = (flat index mod 2**32) * C - a`` as int32, and the index's high words
``flat // 2**32`` where the tensor has 2**32 elements or more (else None).

The flat index is never materialised: it is a sum of one small ``arange`` per group of
dimensions (a dimension split over ranks alone, unsplit neighbours merged), each scaled by its
stride times ``C`` modulo 2**32, so a rank only computes its own part.  Partial sums (``P``) hold
replicas of the positions: they are indexed like broadcast.

``StepRows``: under gradient accumulation a micro-batch's dim 0 is numbered by its place in the
step's global batch.  Micro-batch ``m`` of a step is its positions ``[m * S, (m + 1) * S)`` on
every layout (``global_order``: data-parallel rank ``r`` reads ``[m * S + r * s, m * S + (r + 1) * s)``
of it, ``S = dp * s``), so global row ``j`` of micro-batch ``m`` is position ``m * S + j``: the same
position, hence the same bits, as on 1 rank with the whole global batch.  A dim 0 of ``k`` rows a
sample (heads or windows folded into the batch, sample-major) is numbered the same way.
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
    return values * _scaled(key, factor)


def _view(term, dims, ndim):
    """``term`` over dims ``dims`` (consecutive), shaped to broadcast against ``ndim`` dims; unsqueeze
    (not reshape) keeps a split vector's axis attached to its dimension."""
    for _ in range(dims[0]):
        term = term.unsqueeze(0)
    for _ in range(ndim - dims[-1] - 1):
        term = term.unsqueeze(-1)
    return term


def _high_words(vectors, strides, ndim):
    """``flat // 2**32`` from ``(dims, positions, first position)`` per group, in float64 (exact
    below 2**53): only tensors of 2**32 elements or more pay for it."""
    flat = None
    for dims, vector, first in vectors:
        term = _view((vector.to(flow.float64) + float(first)) * float(strides[dims[-1]]), dims, ndim)
        flat = term if flat is None else flat + term
    return (flat * (1.0 / _LOW_WORDS)).to(flow.int32)


# ---- whole tensors (global ops, or one local tensor) ---------------------------------------------

def replicated(sbp):
    """``sbp`` with partial-sum axes as broadcast: every part of a partial sum covers the whole tensor, as a
    replica does, so it is drawn (and indexed) like one."""
    return [flow.sbp.broadcast if s == flow.sbp.partial_sum else s for s in sbp]


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
    C, a = keys[0], keys[1]
    if len(vectors) == 1:
        x0 = (_times_key(vectors[0][1], C, strides[groups[0][-1]]) - a).reshape(shape)
    else:
        layout = dict(placement=placement, sbp=sbp) if placement is not None else dict(device=device)
        x0 = flow.zeros(shape, dtype=flow.int32, **layout)
        for group, vector in vectors:  # x0 - (positions * -C * stride): exact ops only
            x0 = x0 - _view(_times_key(vector, C, -strides[group[-1]]), group, len(shape))
        x0 = x0 - a
    large = int(np.prod(virtual, dtype=np.int64)) >= _LOW_WORDS
    hi = _high_words([(g, v, 0) for g, v in vectors], strides, len(shape)) if large else None
    return x0, hi


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


def _slice_index(shape, lo, hi, keys, device):
    """``(x0, hi words)`` of the box ``[lo, hi)`` of a tensor of ``shape`` (int keys).

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
    if len(vectors) == 1:
        run, vector, first = vectors[0]
        x0 = (_times_key(vector, C, strides[run[-1]]) + to_signed(C * first * strides[run[-1]] - a))
        x0 = x0.reshape(local_shape)
    else:
        x0 = flow.zeros(local_shape, dtype=flow.int32, device=device)
        for run, vector, first in vectors:
            term = _times_key(vector, C, -strides[run[-1]]) + to_signed(-C * first * strides[run[-1]])
            x0 = x0 - _view(term, run, len(shape))
        x0 = x0 - a
    large = int(np.prod(shape, dtype=np.int64)) >= _LOW_WORDS
    return x0, (_high_words(vectors, strides, len(shape)) if large else None)


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


def keyed_slice(shape, lo, hi, keys, device=None, rows=None):
    """``(x0, hi words)`` of this rank's box ``[lo, hi)`` of a global tensor of ``shape`` (``rows``: dim 0
    numbered by its place in the step)."""
    shape, lo, hi = tuple(int(s) for s in shape), [int(v) for v in lo], [int(v) for v in hi]
    if not shape:
        x0, high = keyed_index((1,), keys, device=device)
        return x0.reshape(()), high
    if rows is None:
        return _slice_index(shape, lo, hi, keys, device)
    virtual = (shape[0] * rows.micro_batches,) + shape[1:]
    offset = rows.offset(shape[0])
    return _slice_index(virtual, [lo[0] + offset] + lo[1:], [hi[0] + offset] + hi[1:], keys, device)
