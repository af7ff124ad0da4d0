"""Every rank of a large layout, simulated on one host: its box of every draw, through its own code path.

A rank's part of a draw depends only on its coordinates in the placement and on the global shape, so the ranks of
(dp 32, tp 8, pp 4) run one after another in one process, each compared with the 1-rank global draw at the same
positions.  For every draw site and every rank that holds it:

* its box comes from ``global_index.shard_box`` (what the eager layers and ``forward_draws`` call) at the rank's
  coordinates in the placement LiBai builds, checked against a box computed here independently (``reference_box``:
  OneFlow's nested balanced split, measured);
* the eager paths compute sub-boxes of it from their global offsets: the host kernel, the int32-op path (what a GPU
  runs), the host's values, and ``forward_draws.Draw.local_box`` for local tensors under data parallelism;
* the global-op path (what ``nn.Graph`` traces and what re-draws initial weights) runs ``global_index.keyed_index``
  on a window of the rank's positions (``_window``), the simulator playing OneFlow's part (each split ``arange``);
  1-D tensors take the eager paths only (their global ``reshape`` has no window).

Positions compared (``check_box``): corners, a random sub-box, the edges (host paths only: the int32-op path costs
tens of OneFlow ops a call) and both sides of every multiple of 2**31 of the flat (mask: word) index.  A
micro-batch's rows are numbered by their place in the step's batch, so the reference is the 1-rank draw of the whole
step.  First, at reduced widths (``reduced_model``), every position of every rank's box goes through the chunked
paths and OneFlow's own global ops (``check_whole_box``, ``check_global_ops``).  ``mutate`` injects one fault
(``MUTATIONS``) that a run must find.
"""
import contextlib
import dataclasses
import itertools
import time
import warnings
import zlib
from unittest import mock

import numpy as np
import oneflow as flow

from ..compat.vocab_padding import round_up
from ..random import counter_rng, counter_spec, forward_draws, global_index, param_init
from ..random.layers import stochastic
from ..random.counter_spec import MASK32

SEED = 1234
STEP = 123457  # a step of a long run (the keys depend on it; the indexing does not)
BOUNDARY = 2 ** 31

MUTATIONS = {
    "box-offset": "a rank's box starts one element late along each dimension it does not start at 0",
    "stride": "every stride computed from a row one element short",
    "axis": "the placement's hierarchy axes swapped (a rank reads its tp coordinate as its dp one)",
    "truncate32": "every flat index truncated to its low 32 bits",
    # faults in assembling a rank's box from chunks: only the whole-box check (reduced widths) sees them
    "chunk-last": "the int-op path's last chunk of a box left out (its positions never written)",
    "chunk-offset": "every chunk after a box's first hashes the row before its own (an off-by-one chunk offset)",
    "chunk-swap": "the first two neighbouring chunks of one size written at each other's rows",
    "apply-last": "the eager apply step's last, partial chunk left out (forward and backward)",
}


# ---- models ---------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Model:
    """Shapes of a transformer at real size; ``global_batch`` sequences (images) of ``tokens``."""
    name: str
    hidden: int
    heads: int
    layers: int
    tokens: int
    ffn: int
    vocab: int = 0  # 0: no word embedding (vision)
    global_batch: int = 512
    attention_dropout: float = 0.1
    hidden_dropout: float = 0.1
    drop_path: float = 0.0
    window_tokens: int = 0  # Swin: attention inside windows of this many tokens


# Shapes as LiBai's configs give them (configs/common/models/ of LiBai main): BERT's vocabulary 30,522;
# LiBai's vit_huge_patch14_224 sets patch_size 16 (196 patches + the class token); Swin-B's embed_dim
# 128, depths [2, 2, 18, 2], drop_path_rate 0.5, window 7 at 224 px (first stage: 56 x 56 tokens).
# LiBai ships no GPT-3 or GPT-2 XL config: their published shapes, on LiBai's GPT.  Drop rates are 0.1 where a
# config turns a dropout off (a user's setting; the rate changes no index), Swin-B's drop-path its config's 0.5.
MODELS = {
    "gpt3-175b": Model("gpt3-175b", 12288, 96, 96, 2048, 4 * 12288, vocab=50257, global_batch=1536),
    "gpt2-xl": Model("gpt2-xl", 1600, 25, 48, 1024, 4 * 1600, vocab=50257, global_batch=512),
    "bert-large": Model("bert-large", 1024, 16, 24, 512, 4096, vocab=30522, global_batch=512),
    "vit-h14": Model("vit-h14", 1280, 16, 32, 197, 5120, global_batch=4096, drop_path=0.1,
                     attention_dropout=0.0),
    "swin-b": Model("swin-b", 128, 4, 24, 56 * 56, 512, global_batch=1024, drop_path=0.5,
                    attention_dropout=0.0, window_tokens=49),
}


def reduced_model(model, layout):
    """``model`` at widths where one host computes every rank's box of every draw whole (``Simulation``'s
    whole-box phase): one row of a micro-batch per data-parallel rank, 2 heads per tensor-parallel rank, 5 tokens
    (an odd number of columns: the last word's low half unused), hidden ``2 tp + 3``; the layers and rates
    stay the model's."""
    hidden = 2 * layout.tp + 3
    window = 4 if model.window_tokens else 0
    return dataclasses.replace(model, name=f"{model.name}, reduced", hidden=hidden, heads=2 * layout.tp,
                               tokens=2 * window if window else 5, ffn=4 * hidden, vocab=min(model.vocab, 50),
                               global_batch=layout.dp * layout.micro_batches, window_tokens=window)


# Sites given with --site are also checked whole up to this many elements (a micro-batch's).
WHOLE_ELEMENTS = 2 ** 16


# ---- the layout LiBai builds -----------------------------------------------------------------------

B = "B"


def S(d):
    return ("S", d)


@dataclasses.dataclass(frozen=True)
class Layout:
    dp: int
    tp: int
    pp: int
    micro_batches: int

    @property
    def world(self):
        return self.dp * self.tp * self.pp

    def stage_ranks(self, stage):
        """The placement's ranks of ``stage``: a (dp, tp) grid where both split, else a line."""
        n = self.dp * self.tp
        ranks = np.arange(stage * n, (stage + 1) * n)
        return ranks.reshape(self.dp, self.tp) if self.dp > 1 and self.tp > 1 else ranks

    def nd_sbp(self, pair):
        """``dist.get_nd_sbp``: the (data, tensor) pair, cut to the axes the placement has."""
        if self.dp > 1 and self.tp > 1:
            return list(pair)
        if self.dp > 1:
            return [pair[0]]
        if self.tp > 1:
            return [pair[1]]
        return [B]

    def layer_stage(self, layer, layers):
        """LiBai 0.1.1's uniform split of the layers over the stages."""
        return layer // -(-layers // self.pp)


def oneflow_sbp(sbp):
    return [flow.sbp.broadcast if s == B else flow.sbp.split(s[1]) for s in sbp]


# ---- draw sites ----------------------------------------------------------------------------------

@dataclasses.dataclass
class Site:
    """One draw: ``kind`` "mask" (dropout / drop-path keep mask) or "values" (32 random bits per element)."""
    name: str
    kind: str
    shape: tuple       # the global tensor one rank set holds (a micro-batch's, for ``rows``)
    sbp: tuple         # the (data, tensor) pair, before ``nd_sbp``
    stages: tuple
    stream: str
    rate: float = 0.0
    rows: bool = False  # dim 0 is a micro-batch's rows of the step
    local_dp: bool = False  # a local tensor of this rank's rows (forward_draws.Draw.local_box)
    graph: bool = True     # also through the global-op path

    def virtual_shape(self, layout):
        if self.rows:
            return (self.shape[0] * layout.micro_batches,) + tuple(self.shape[1:])
        return tuple(self.shape)


def model_sites(model, layout):
    """The draw sites of ``model`` on ``layout``: activations of a micro-batch, and the weights of the
    first and last layer of every stage (where the pipeline split decides which ranks hold them)."""
    if model.global_batch % (layout.dp * layout.micro_batches):
        raise ValueError(f"--model {model.name}: global batch {model.global_batch} is not divisible by dp "
                         f"{layout.dp} x micro-batches {layout.micro_batches}")
    micro = model.global_batch // layout.micro_batches  # a micro-batch's global rows
    stages = tuple(range(layout.pp))
    h, t = model.hidden, model.tokens
    sites = []
    if model.window_tokens:
        windows = (t // model.window_tokens)
        sites.append(Site("attention-probs dropout", "mask", (micro * windows, model.heads, model.window_tokens,
                                                              model.window_tokens), (S(0), B), stages,
                          "model.layers.0.attn.attn_drop", 0.1, rows=True))
    elif model.attention_dropout:
        sites.append(Site("attention-probs dropout", "mask", (micro, model.heads, t, t), (S(0), S(1)), stages,
                          "model.transformer.layers.0.self_attention.dropout", model.attention_dropout, rows=True))
    if model.hidden_dropout:
        sites.append(Site("hidden dropout", "mask", (micro, t, h), (S(0), B), stages,
                          "model.transformer.layers.0.output_dropout", model.hidden_dropout, rows=True))
    if model.vocab:
        sites.append(Site("embedding dropout", "mask", (micro, t, h), (S(0), B), (0,),
                          "model.embeddings.dropout", model.hidden_dropout, rows=True))
    if model.drop_path:
        sites.append(Site("drop-path", "mask", (micro, 1, 1), (S(0), B), stages,
                          "model.blocks.0.drop_path", model.drop_path, rows=True))
    # MAE's masking: flow.rand(N, L, sbp=x.sbp, placement=x.placement), and the same as a local tensor
    sites.append(Site("flow.rand by global position", "values", (micro, t), (S(0), B), (0,),
                      "model:rand@mae.py:1(random_masking)", rows=True))
    if layout.dp > 1:
        sites.append(Site("local flow.rand under dp", "values", (micro, t), (S(0), B), (0,),
                          "model:rand@mae.py:2(random_masking)", rows=True, local_dp=True, graph=False))
    if model.vocab:
        vocab = round_up(model.vocab, 128 * layout.tp)  # LiBai's make_vocab_size_divisible_by (128) x tp
        sites.append(Site("init word embedding", "values", (vocab, h), (B, S(0)), (0,),
                          "model.embeddings.word_embeddings.weight"))
        sites.append(Site("init position embedding", "values", (t, h), (B, B), (0,),
                          "model.embeddings.position_embeddings.weight"))
    last = model.layers - 1
    per_stage = -(-model.layers // layout.pp)
    layers = sorted({layer for s in stages for layer in (s * per_stage, min(last, (s + 1) * per_stage - 1))})
    tp_linear = not model.window_tokens  # LiBai's Swin has data-parallel linears only
    for layer in layers:
        stage = (layout.layer_stage(layer, model.layers),)
        prefix = f"model.layers.{layer}"
        column, row = ((B, S(1)), (B, S(0))) if tp_linear else ((B, B), (B, B))
        sites += [
            Site(f"init layer {layer} qkv weight", "values", (h, 3 * h), column, stage, f"{prefix}.qkv.weight"),
            Site(f"init layer {layer} qkv bias", "values", (3 * h,), (B, S(0)) if tp_linear else (B, B), stage,
                 f"{prefix}.qkv.bias"),
            Site(f"init layer {layer} attention output", "values", (h, h), row, stage, f"{prefix}.dense.weight"),
            Site(f"init layer {layer} mlp in", "values", (h, model.ffn), column, stage, f"{prefix}.h_to_4h.weight"),
            Site(f"init layer {layer} mlp out", "values", (model.ffn, h), row, stage, f"{prefix}.4h_to_h.weight"),
        ]
    return sites


def parse_site(text):
    """``NAME:KIND:D0xD1x...:SBP`` (KIND mask@RATE or values; SBP two of B, S0, S1, ... for (data, tensor);
    ``:rows`` at the end when dim 0 is a micro-batch's rows)."""
    parts = text.split(":")
    if len(parts) not in (4, 5) or (len(parts) == 5 and parts[4] != "rows"):
        raise ValueError(f"--site {text!r}: expected NAME:KIND:SHAPE:SBP[:rows], e.g. "
                         "probs:mask@0.1:1536x96x2048x2048:S0,S1:rows")
    name, kind, shape, sbp = parts[:4]
    rate = 0.0
    if kind.startswith("mask@"):
        kind, rate = "mask", float(kind[5:])
    if kind not in ("mask", "values"):
        raise ValueError(f"--site {text!r}: KIND must be mask@RATE or values")
    try:
        dims = tuple(int(d) for d in shape.split("x"))
        pair = tuple(B if s == "B" else S(int(s[1:])) for s in sbp.split(","))
    except ValueError:
        raise ValueError(f"--site {text!r}: SHAPE is D0xD1x..., SBP two of B, S0, S1, ...") from None
    if len(pair) != 2 or any(s != B and s[1] >= len(dims) for s in pair):
        raise ValueError(f"--site {text!r}: SBP needs two entries (data, tensor) splitting dims of the shape")
    return Site(name, kind, dims, pair, None, f"site/{name}", rate, rows=len(parts) == 5)


# ---- simulated ranks --------------------------------------------------------------------------------

class SimulatedPlacement:
    """What ``global_index`` reads of a placement (``ranks``), for rank ``rank``; ``window``: per dim,
    the global positions the global-op path computes (the rank's slice, or a sample of it)."""

    def __init__(self, ranks, rank, window=None):
        self.ranks, self.rank, self.window, self.type = np.asarray(ranks), int(rank), window, "cpu"
        self._key = (self.ranks.shape, self.ranks.tobytes(), self.rank)

    def __hash__(self):
        return hash(self._key)

    def __eq__(self, other):
        return isinstance(other, SimulatedPlacement) and other._key == self._key


_simulated_rank = [0]
_device = ["cpu"]  # where the int32-op and global-op paths run (a GPU under ``make gpu-check``)
_current_window = [None]  # (window, shape) of the global-op call being simulated


@contextlib.contextmanager
def simulated_environment():
    """``flow.env.get_rank()`` answers the simulated rank; the global-op path's OneFlow part is played here."""
    real_group_vector, real_groups = global_index._group_vector, global_index._dim_groups

    def get_rank():
        return _simulated_rank[0]

    def group_vector(shape, group, placement, sbp, device):
        if not isinstance(placement, SimulatedPlacement):
            return real_group_vector(shape, group, placement, sbp, device)
        size = int(np.prod([shape[d] for d in group], dtype=np.int64))
        if len(group) > 1:  # unsplit dims the window covers whole: the positions every rank holds
            return global_index._arange(size, device=_device[0])
        (d,) = group
        return flow.tensor(placement.window[d], dtype=flow.int32 if size < 2 ** 31 else flow.int64,
                           device=_device[0])

    def groups(ndim, alone):
        """The path's groups where the window covers a merged group whole, else its dims one by one."""
        window, shape = _current_window[0]
        out = []
        for group in real_groups(ndim, alone):
            if len(group) > 1 and all(len(window[d]) == shape[d] for d in group):
                out.append(group)
            else:
                out += [[d] for d in group]
        return out

    with mock.patch.object(flow.env, "get_rank", get_rank), \
            mock.patch.object(global_index, "_group_vector", group_vector), \
            mock.patch.object(global_index, "_dim_groups", groups):
        yield


@contextlib.contextmanager
def mutation(kind):
    """Inject one fault of ``MUTATIONS`` into the rank path (None: none)."""
    if kind is None:
        yield
        return
    if kind not in MUTATIONS:
        raise ValueError(f"--mutate {kind!r}: one of {', '.join(MUTATIONS)}")
    if kind == "box-offset":
        real = global_index.shard_box

        def shard_box(shape, placement, sbp):
            box = real(shape, placement, sbp)
            if box is None:
                return None
            lo, hi = box
            return [a + (a > 0) for a in lo], [b + (a > 0) for a, b in zip(lo, hi)]
        patches = [mock.patch.object(global_index, "shard_box", shard_box)]
    elif kind == "stride":
        def strides(shape):
            short = tuple(shape[:-1]) + (max(int(shape[-1]) - 1, 0),) if len(shape) else ()
            return [int(np.prod(short[d + 1:], dtype=np.int64)) for d in range(len(shape))]
        patches = [mock.patch.object(global_index, "_strides", strides)]
    elif kind == "axis":
        real = global_index.placement_coordinates

        def placement_coordinates(placement):
            hierarchy, coordinates = real(placement)
            if coordinates is None:
                return hierarchy, None
            return tuple(reversed(hierarchy)), tuple(reversed(coordinates))
        patches = [mock.patch.object(global_index, "placement_coordinates", placement_coordinates)]
    elif kind.startswith("chunk-"):
        real_chunks = counter_rng.mask_chunks

        def mask_chunks(lo, hi, hashed, limit):
            return _mutated_chunks(kind, list(lo), real_chunks(lo, hi, hashed, limit))
        patches = [mock.patch.object(counter_rng, "mask_chunks", mask_chunks)]
    elif kind == "apply-last":
        real_apply = stochastic.apply_chunks

        def apply_chunks(elements, chunk):
            parts = real_apply(elements, chunk)
            return parts[:-1] if len(parts) > 1 and parts[-1].stop - parts[-1].start < chunk else parts
        patches = [mock.patch.object(stochastic, "apply_chunks", apply_chunks)]
    else:  # truncate32
        real_slice, real_mask = global_index.slice_terms, global_index.mask_terms

        def low_words(terms):
            return [t & MASK32 for t in terms]
        patches = [mock.patch.object(global_index, "_LOW_WORDS", 2 ** 64),
                   mock.patch.object(global_index, "slice_terms", lambda *a, **k: low_words(real_slice(*a, **k))),
                   mock.patch.object(global_index, "mask_terms", lambda *a, **k: low_words(real_mask(*a, **k)))]
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        yield


def _mutated_chunks(kind, lo, chunks):
    if len(chunks) < 2:
        return chunks
    if kind == "chunk-last":
        return chunks[:-1]
    if kind == "chunk-swap":  # the first two neighbours of one size
        def size(chunk):
            return [b - a for a, b in zip(chunk.row_lo, chunk.row_hi)] + [chunk.stop - chunk.first]
        i = next((i for i in range(len(chunks) - 1) if size(chunks[i]) == size(chunks[i + 1])), None)
        if i is None:
            return chunks
        first, second = chunks[i:i + 2]
        return chunks[:i] + [first._replace(at=second.at), second._replace(at=first.at)] + chunks[i + 2:]
    out = chunks[:1]  # chunk-offset: the hashed rows one early along the dim the chunk advanced, written in place
    for chunk in chunks[1:]:
        dim = next((d for d, (a, b) in enumerate(zip(chunk.row_lo, lo)) if a > b), None)
        if dim is None:
            out.append(chunk)
            continue
        shift = [int(d == dim) for d in range(len(lo))]
        out.append(chunk._replace(row_lo=tuple(a - s for a, s in zip(chunk.row_lo, shift)),
                                  row_hi=tuple(b - s for b, s in zip(chunk.row_hi, shift))))
    return out


# ---- the reference: the 1-rank draw ---------------------------------------------------------------------

def reference_box(shape, hierarchy, coordinates, sbp):
    """The box a rank holds, as numpy's ``array_split`` nests the splits (OneFlow's rule, measured)."""
    lo, hi = [0] * len(shape), list(shape)
    for axis, s in enumerate(sbp):
        if s != B:
            d = s[1]
            edges = np.cumsum([0] + [len(p) for p in np.array_split(np.arange(hi[d] - lo[d]), hierarchy[axis])])
            part = coordinates[axis]
            lo[d], hi[d] = lo[d] + int(edges[part]), lo[d] + int(edges[part + 1])
    return lo, hi


def step_rows(site, layout, micro, g0):
    """The step position (1-rank row) of global row ``g0`` of micro-batch ``micro`` (numpy ints)."""
    if not site.rows or layout.micro_batches == 1:
        return g0
    return micro * site.shape[0] + g0


def micro_rows(site, layout, position):
    """``(micro-batch, global row of it)`` of step position ``position`` (``step_rows``'s inverse)."""
    if not site.rows or layout.micro_batches == 1:
        return 0, position
    return divmod(position, site.shape[0])


def reference(site, layout, keys, micro, coords):
    """The 1-rank draw at global coordinates ``coords`` (a list of int64 arrays, one per dim, broadcast
    against each other): bool keeps (masks) or uint32 bits (values)."""
    virtual = site.virtual_shape(layout)
    coords = [step_rows(site, layout, micro, coords[0])] + list(coords[1:])
    unsigned = [int(k) & MASK32 for k in keys]
    if site.kind == "values":
        flat = sum(np.asarray(c, dtype=np.int64) * int(np.prod(virtual[d + 1:], dtype=np.int64))
                   for d, c in enumerate(coords))
        return counter_spec.permute((flat & MASK32).astype(np.uint64), unsigned, (flat >> 32).astype(np.uint64))
    matrix, columns = _mask_matrix(virtual)
    row = sum(np.asarray(c, dtype=np.int64) * int(np.prod(matrix[d + 1:], dtype=np.int64))
              for d, c in enumerate(coords[:len(matrix)]))
    column = np.asarray(coords[len(matrix)] if len(coords) > len(matrix) else 0, dtype=np.int64)
    row, column = np.broadcast_arrays(row, column)
    word, low = counter_spec.mask_word(row, column, columns)
    bits = counter_spec.mask_permute((word & MASK32).astype(np.uint64), unsigned, (word >> 32).astype(np.uint64))
    return counter_spec.keep(bits, low, counter_spec.keep_level(site.rate))


def _mask_matrix(shape):
    """(leading dims, columns) a mask is read as (``counter_spec.mask_columns``, dims kept)."""
    if len(shape) >= 2:
        return tuple(shape[:-1]), int(shape[-1])
    return ((shape[0] if shape else 1),), 1


def boundary_points(site, layout):
    """``(micro-batch, global coordinates)`` on both sides of every multiple of 2**31 of the hashed index."""
    virtual = site.virtual_shape(layout)
    points = []
    if site.kind == "values":
        total = int(np.prod(virtual, dtype=np.int64))
        for k in range(1, (total - 1) // BOUNDARY + 1):
            for flat in (k * BOUNDARY - 1, k * BOUNDARY):
                points.append(np.unravel_index(flat, virtual))
    else:
        matrix, columns = _mask_matrix(virtual)
        words = (columns + 1) // 2
        total = int(np.prod(matrix, dtype=np.int64)) * words
        for k in range(1, (total - 1) // BOUNDARY + 1):
            for word in (k * BOUNDARY - 1, k * BOUNDARY):
                row, w = divmod(word, words)
                lead = np.unravel_index(row, matrix)
                for column in (w, w + words):
                    if column < columns:
                        points.append(tuple(lead) + ((column,) if len(virtual) >= 2 else ()))
    out = []
    for point in points:
        micro, g0 = micro_rows(site, layout, int(point[0]))
        out.append((micro, (g0,) + tuple(int(p) for p in point[1:])))
    return out


# ---- the rank paths ----------------------------------------------------------------------------------

def site_keys(site):
    """The keys the runtime derives: a layer's draw of step ``STEP`` (``stream_keys``), or an initial weight's
    first stream (``param_init.DrawKeys``: seed, "param_init", the tensor's name, stream 0)."""
    if site.name.startswith("init "):
        return counter_rng.derive_keys(SEED, param_init._STREAM, site.stream, 0)
    return counter_rng.stream_keys(SEED, site.stream, STEP, 0)


def rows_of(site, layout, micro):
    if not site.rows or layout.micro_batches == 1:
        return None
    return global_index.StepRows(layout.micro_batches, micro)


def eager_paths(site):
    """``{path name: f(shape, lo, hi, keys, rows) -> numpy}`` of a site's eager rank paths."""
    if site.kind == "mask":
        def kernel(shape, lo, hi, keys, rows):
            return counter_rng.local_keep_mask(shape, lo, hi, keys, site.rate, "cpu", rows).numpy()

        def int_ops(shape, lo, hi, keys, rows):
            with mock.patch.object(counter_rng, "_counter_kernel", None):
                return counter_rng.local_keep_mask(shape, lo, hi, keys, site.rate, _device[0], rows).numpy()
        paths = {"eager host kernel": kernel, "eager int32 ops": int_ops}
        return paths if counter_rng._counter_kernel is not None else {"eager int32 ops": int_ops}

    def host(shape, lo, hi, keys, rows):
        return forward_draws.host_bits(shape, lo, hi, keys, rows).numpy().view(np.uint32)

    def int_ops(shape, lo, hi, keys, rows):
        return counter_rng.local_counter_bits(shape, lo, hi, keys, _device[0], rows).numpy().view(np.uint32)
    return {"eager host": host, "eager int32 ops": int_ops}


def graph_path(shape, sbp, placement_ranks, rank, window, keys, rows, rotate=counter_rng.rotate_mix):
    """The global-op path's bits (``counter_bits`` with a placement) at the window (global positions per
    dim) of ``rank``; ``rotate_trunc`` for a mask's words."""
    placement = SimulatedPlacement(placement_ranks, rank, window)
    _current_window[0] = (window, tuple(shape))
    return counter_rng.counter_bits(shape, keys, placement, sbp, rows=rows, rotate=rotate).numpy().view(np.uint32)


@dataclasses.dataclass
class Finding:
    site: str
    rank: int
    coordinates: tuple
    path: str
    position: tuple
    got: object
    expected: object

    def __str__(self):
        return (f"MISMATCH {self.site}: rank {self.rank} (stage, dp, tp) = {self.coordinates}, {self.path}, "
                f"first differing position {self.position} of the 1-rank draw: {self.got} != {self.expected}")


def _sample_boxes(sizes, rng):
    """Local sub-boxes ``(lo, hi)`` of a box of ``sizes``: ``(corners and a random box, edges)``; the edges take
    the far end along one dim and the near end along the others."""
    lo_corner = [[0, min(2, n)] for n in sizes]
    hi_corner = [[max(0, n - 2), n] for n in sizes]
    start = [int(rng.integers(0, max(1, n - 1))) for n in sizes]
    core = [lo_corner, hi_corner, [[a, min(a + 2, n)] for a, n in zip(start, sizes)]]
    edges = []
    for d in range(len(sizes)):
        box = [list(b) for b in lo_corner]
        box[d] = hi_corner[d]
        edges.append(box)

    def boxes(chosen, skip=()):
        unique = {tuple(tuple(b) for b in box) for box in chosen} - set(skip)
        return [([b[0] for b in box], [b[1] for b in box]) for box in sorted(unique)]
    core_boxes = boxes(core)
    return core_boxes, boxes(edges, skip={tuple(tuple(b) for b in box) for box in core})


def _window(sizes, rng):
    """Local positions per dim for the global-op path: ends, middle and a random one; a small dim whole (where
    neighbours are whole too, the path merges them into one index group, as it does on a real rank)."""
    return [list(range(n)) if n <= SMALL_DIM else
            sorted({0, min(1, n - 1), n // 2, max(0, n - 2), n - 1, int(rng.integers(0, n))}) for n in sizes]


SMALL_DIM = 64


_unmutated_chunks = counter_rng.mask_chunks  # the plan as the runtime makes it, whatever ``mutation`` injects


def chunk_limits(shape, lo, hi, within_rows=True):
    """Chunk sizes (words) at which ``counter_rng``'s int-op path assembles the mask box ``[lo, hi)`` from
    several launches, found by its own ``mask_chunks``: the largest cutting the rows into three chunks or more, the
    last one partial; and (``within_rows``), where a row holds several words, the largest cutting each row's
    words, the last range partial (a launch per row and range; real rows never exceed a chunk).  ``{limit: chunks}``."""
    matrix, lo, hi, _ = counter_rng._as_matrix(shape, lo, hi)
    _, _, hashed = counter_rng._column_halves(matrix[-1], lo[-1], hi[-1])
    width = hashed[1] - hashed[0]
    total = int(np.prod([b - a for a, b in zip(lo[:-1], hi[:-1])], dtype=np.int64)) * width
    limits = {}
    for parts in range(3, 65):
        limit = max(width, total // parts)
        chunks = _unmutated_chunks(lo[:-1], hi[:-1], hashed, limit)
        sizes = [int(np.prod([b - a for a, b in zip(c.row_lo, c.row_hi)])) for c in chunks]
        if len(chunks) >= 3 and sizes[-1] < sizes[0]:
            limits[limit] = len(chunks)
            break
    limit = next((w for w in range(width - 1, 0, -1) if width % w), None) if within_rows else None
    if limit is not None:
        limits[limit] = len(_unmutated_chunks(lo[:-1], hi[:-1], hashed, limit))
    return limits


def apply_limit(elements):
    """An apply-chunk size cutting ``elements`` into two launches or more, the last one partial (None: too few)."""
    return next((c for c in range(max(1, elements // 3), elements) if elements % c), None)


@contextlib.contextmanager
def chunked(mask_words=None, apply_elements=None):
    """The eager int-op path cut into chunks of ``mask_words`` words, the apply step into ``apply_elements``."""
    with contextlib.ExitStack() as stack:
        if mask_words:
            stack.enter_context(mock.patch.dict(counter_rng.CHUNK_WORDS, dict.fromkeys(counter_rng.CHUNK_WORDS,
                                                                                          mask_words)))
        if apply_elements:
            stack.enter_context(mock.patch.dict(stochastic.APPLY_CHUNK, dict.fromkeys(stochastic.APPLY_CHUNK,
                                                                                        apply_elements)))
        yield


@contextlib.contextmanager
def poisoned(mask=None):
    """``flow.empty`` of a bool tensor of ``mask``'s size pre-filled with ``~mask`` and ``flow.empty_like`` of a
    float tensor with NaN: a position no chunk writes then differs from the reference, whatever memory held."""
    real_empty, real_empty_like = flow.empty, flow.empty_like

    def empty(*args, **kwargs):
        out = real_empty(*args, **kwargs)
        if mask is not None and out.dtype == flow.bool and out.numel() == mask.size and not out.is_global:
            out[...] = flow.tensor(~mask.reshape(tuple(out.shape)), device=out.device)
        return out

    def empty_like(x, *args, **kwargs):
        out = real_empty_like(x, *args, **kwargs)
        if out.is_floating_point():
            (out.to_local() if out.is_global else out)[...] = float("nan")
        return out
    with mock.patch.object(flow, "empty", empty), mock.patch.object(flow, "empty_like", empty_like):
        yield


class Simulation:
    """One run: a layout, its sites, an optional mutation; ``run()`` returns the report lines and findings.
    ``whole_sites``: sites (at reduced widths) whose every rank's box is checked whole, before the sampled
    check of ``sites`` at full size.  A mutated run stops at its first difference."""

    def __init__(self, layout, sites, mutate=None, seed=0, whole_sites=()):
        self.layout, self.sites, self.mutate, self.seed = layout, sites, mutate, seed
        self.whole_sites = list(whole_sites)
        self.chunks = 0  # launches of the chunked paths the whole-box phase ran
        self.graph_run = False  # one nn.Graph a simulation (docs/upstream-bugs.md §39: a tiny CPU graph's run
        # can end before OneFlow 0.9.0 has queued it, and then crashes the process)

    def _compare(self, got, expected, first_global, path, context):
        """The first differing position (global coordinates), or None."""
        got, expected = np.asarray(got), np.asarray(expected)
        if got.shape != expected.shape:
            return path, tuple(first_global), f"shape {got.shape}", f"shape {expected.shape}"
        bad = np.argwhere(got != expected.astype(got.dtype))
        if not len(bad):
            return None
        where = tuple(int(a) for a in bad[0])
        return path, context(where), got[where], expected[where]

    def check_box(self, site, ranks, rank, box, true_box, micro, points):
        """Compare the rank's values with the reference at sampled positions of its box; ``(path, position,
        got, expected)`` of the first difference, or None.  Also returns the number of positions compared."""
        layout, keys = self.layout, site_keys(site)
        rows = rows_of(site, layout, micro)
        shape = tuple(site.shape)
        sizes = [b - a for a, b in zip(*box)]
        true_sizes = [b - a for a, b in zip(*true_box)]
        if sizes != true_sizes:
            return ("shard_box", tuple(box[0]), f"box of {sizes}", f"box of {true_sizes}"), 0
        rng = np.random.default_rng([self.seed, zlib.crc32(site.name.encode()), rank, micro])  # the same every run
        lo = list(box[0])
        count = 0
        if points is None:
            core, edges = _sample_boxes(sizes, rng)
        else:
            core = [([a - t for a, t in zip(lo_p, true_box[0])], [b - t for b, t in zip(hi_p, true_box[0])])
                    for lo_p, hi_p in points]
            edges = []
        for path, compute in self._eager(site).items():
            # The int32-op path costs tens of OneFlow ops a call: its edges are left to the host paths, which
            # compute the same index terms (``global_index``) in one call each.
            for q_lo, q_hi in core + (edges if "int32" not in path else []):
                a = [l + q for l, q in zip(lo, q_lo)]
                b = [l + q for l, q in zip(lo, q_hi)]
                if site.local_dp:
                    whole, la, lb, local_rows = self._local_box(site, micro, rank, a, b)
                    got = compute(whole, la, lb, keys, local_rows)
                else:
                    got = compute(shape, a, b, keys, rows)
                coords = np.ix_(*[np.arange(t + qa, t + qb) for t, qa, qb in zip(true_box[0], q_lo, q_hi)])
                expected = reference(site, layout, keys, micro, [c.astype(np.int64) for c in coords])
                count += expected.size
                found = self._compare(got, expected, [t + q for t, q in zip(true_box[0], q_lo)], path,
                                      lambda w: tuple(t + q + i for t, q, i in zip(true_box[0], q_lo, w)))
                if found:
                    return found, count
        if site.graph and len(shape) >= 2:
            sbp = oneflow_sbp(layout.nd_sbp(site.sbp))
            windows = [_window(true_sizes, rng)] if points is None else \
                [[list(range(a - t, b - t)) for a, b, t in zip(lo_p, hi_p, true_box[0])] for lo_p, hi_p in points]
            for local in windows:
                window = [np.array([true_box[0][d] + q for q in local[d]], dtype=np.int64) for d in range(len(shape))]
                if site.kind == "mask":
                    found, n = self._check_words(site, shape, sbp, ranks, rank, window, keys, rows, micro)
                else:
                    got = graph_path(shape, sbp, ranks, rank, window, keys, rows)
                    expected = reference(site, layout, keys, micro, np.ix_(*window))
                    n = expected.size
                    found = self._compare(got, expected, [w[0] for w in window], "global ops (graph, init)",
                                          lambda w: tuple(int(window[d][i]) for d, i in enumerate(w)))
                count += n
                if found:
                    return found, count
        return None, count

    def check_whole_box(self, site, box, true_box, micro, rank):
        """Every position of the rank's box through its eager paths: the int-op path at the chunk sizes of
        ``chunk_limits`` (each allocation poisoned: ``poisoned``; rows cut into words on the boxes of the first
        data-parallel rank), then, for masks, the chunked apply step forward and backward.  ``(finding or None,
        positions compared)``."""
        layout, keys, shape = self.layout, site_keys(site), tuple(site.shape)
        rows = rows_of(site, layout, micro)
        sizes, true_sizes = [b - a for a, b in zip(*box)], [b - a for a, b in zip(*true_box)]
        if sizes != true_sizes:
            return ("shard_box", tuple(box[0]), f"box of {sizes}", f"box of {true_sizes}"), 0
        coords = np.ix_(*[np.arange(a, b, dtype=np.int64) for a, b in zip(*true_box)])
        expected = reference(site, layout, keys, micro, list(coords))
        lo, hi = list(box[0]), list(box[1])

        def where(w):
            return tuple(t + i for t, i in zip(true_box[0], w))
        count = 0
        for path, compute in self._eager(site).items():
            limits = chunk_limits(shape, lo, hi, within_rows=self.coordinates(rank)[1] == 0) if site.kind == "mask" and "int32" in path \
                else {None: 1}
            for limit, chunks in limits.items():
                with chunked(limit), poisoned(expected if site.kind == "mask" else None):
                    if site.local_dp:
                        whole, la, lb, local_rows = self._local_box(site, micro, rank, lo, hi)
                        got = compute(whole, la, lb, keys, local_rows)
                    else:
                        got = compute(shape, lo, hi, keys, rows)
                self.chunks += chunks if limit else 0
                count += expected.size
                name = path if limit is None else f"{path} in {chunks} chunks of <= {limit} words"
                found = self._compare(got, expected, true_box[0], name, where)
                if found:
                    return found, count
        if site.kind == "mask":
            found = self._check_apply(site, expected, where)
            count += 2 * expected.size
            if found:
                return found, count
        return None, count

    def _check_apply(self, site, keep, where):
        """``stochastic.apply_keep`` of the reference mask, in chunks of ``apply_limit``, forward and backward."""
        scale = stochastic.dropout_scale(site.rate)
        n = keep.size
        x = (np.arange(n, dtype=np.float32) % 13 + 1).reshape(keep.shape)
        dy = (np.arange(n, dtype=np.float32) % 7 - 3.5).reshape(keep.shape)
        m = keep.astype(np.float32) * np.float32(scale)
        limit = apply_limit(n)
        x_tensor = flow.tensor(x, device=_device[0], requires_grad=True)
        with chunked(apply_elements=limit), poisoned():
            y = stochastic.apply_keep(x_tensor, flow.tensor(keep, device=_device[0]), scale)
            y.backward(flow.tensor(dy, device=_device[0]))
        self.chunks += len(stochastic.apply_chunks(n, limit or n))
        name = f"eager apply in {len(stochastic.apply_chunks(n, limit or n))} chunks"
        return (self._compare(y.numpy(), x * m, where((0,) * keep.ndim), f"{name}, forward", where)
                or self._compare(x_tensor.grad.numpy(), dy * m, where((0,) * keep.ndim), f"{name}, backward", where))

    def check_global_ops(self, site, micro, in_graph=True):
        """The whole tensor through OneFlow's own global ops (what ``nn.Graph`` traces) on a one-rank placement of
        the layout's hierarchy and sbp; a mask also inside an ``nn.Graph`` with its apply step (``in_graph``).
        Outside the simulated environment: OneFlow computes every index here.  ``(finding or None, positions
        compared)``."""
        layout, keys, shape = self.layout, site_keys(site), tuple(site.shape)
        rows = rows_of(site, layout, micro)
        sbp = oneflow_sbp(layout.nd_sbp(site.sbp))
        placement = flow.placement("cpu", np.zeros([1] * len(sbp), dtype=np.int64).tolist())
        expected = reference(site, layout, keys, micro, [c for c in np.ix_(*[np.arange(n, dtype=np.int64)
                                                                               for n in shape])])

        def where(w):
            return tuple(int(i) for i in w)
        if site.kind == "values":
            got = counter_rng.counter_bits(shape, keys, placement, sbp, rows=rows).to_local().numpy().view(np.uint32)
            return self._compare(got, expected, (0,) * len(shape), "OneFlow global ops (1 rank)", where), expected.size
        got = counter_rng.keep_mask(shape, site.rate, keys, placement, sbp, rows=rows).to_local().numpy()
        found = self._compare(got, expected, (0,) * len(shape), "OneFlow global ops (1 rank): mask", where)
        if found or not in_graph:
            return found, expected.size
        scale = stochastic.dropout_scale(site.rate)
        x = (np.arange(expected.size, dtype=np.float32) % 13 + 1).reshape(expected.shape)

        class Drop(flow.nn.Graph):
            def build(self, x):
                return stochastic.apply_keep(x, counter_rng.keep_mask(shape, site.rate, keys, placement, sbp,
                                                                      rows=rows), scale)
        with warnings.catch_warnings():  # OneFlow's notes on constants traced in the graph
            warnings.simplefilter("ignore", UserWarning)
            y = Drop()(flow.tensor(x, placement=placement, sbp=sbp)).to_local().numpy()
        m = expected.astype(np.float32) * np.float32(scale)
        return (self._compare(y, x * m, (0,) * len(shape), "nn.Graph (1 rank): mask applied", where),
                2 * expected.size)

    def _check_words(self, site, shape, sbp, ranks, rank, window, keys, rows, micro):
        """Masks through the global-op path: the words a rank hashes (its columns' words), against the spec."""
        matrix, columns = _mask_matrix(shape)
        words = (columns + 1) // 2
        column_window = np.unique(np.where(window[-1] < words, window[-1], window[-1] - words))
        word_window = window[:-1] + [column_window]
        split_columns = any(s != B and s[1] == len(shape) - 1 for s in self.layout.nd_sbp(site.sbp))
        word_sbp = [flow.sbp.broadcast if split_columns and s == flow.sbp.split(len(shape) - 1) else s for s in sbp]
        got = graph_path(matrix + (words,), word_sbp, ranks, rank, word_window, keys, rows, counter_rng.rotate_trunc)
        virtual = site.virtual_shape(self.layout)
        lead = np.ix_(*word_window[:-1], column_window)
        rows_at = [step_rows(site, self.layout, micro, lead[0])] + list(lead[1:-1])
        row = sum(np.asarray(c, dtype=np.int64) * int(np.prod(virtual[d + 1:-1], dtype=np.int64))
                  for d, c in enumerate(rows_at))
        flat = row * words + lead[-1]
        unsigned = [int(k) & MASK32 for k in keys]
        expected = counter_spec.mask_permute((flat & MASK32).astype(np.uint64), unsigned,
                                             (flat >> 32).astype(np.uint64))
        found = self._compare(got, expected, [w[0] for w in word_window], "global ops (graph): mask words",
                              lambda w: tuple(int(word_window[d][i]) for d, i in enumerate(w)) + ("word",))
        return found, expected.size

    def _eager(self, site):
        return eager_paths(site)

    def _local_box(self, site, micro, rank, a, b):
        """A local tensor of this rank's rows under dp: ``forward_draws.Draw.local_box`` gives its global box."""
        layout = self.layout
        per_rank = site.shape[0] // layout.dp
        stage, dp_rank, _ = self.coordinates(rank)
        from ..random.draws import Step
        info = Step(STEP, micro, layout.micro_batches, layout.dp, batch_rows=site.shape[0],
                    data_parallel_rank=dp_rank)
        draw = forward_draws.Draw(site.stream, STEP, 0, info)
        whole, lo, hi, rows = draw.local_box((per_rank,) + tuple(site.shape[1:]))
        offset = [l - a0 for l, a0 in zip(lo, [dp_rank * per_rank] + [0] * (len(lo) - 1))]
        return whole, [x + o for x, o in zip(a, offset)], [x + o for x, o in zip(b, offset)], rows

    def coordinates(self, rank):
        n = self.layout.dp * self.layout.tp
        return rank // n, (rank % n) // self.layout.tp, rank % self.layout.tp

    def run(self, out=print):
        layout = self.layout
        findings, lines = [], []
        runs = [(site, True) for site in self.whole_sites] + [(site, False) for site in self.sites]
        with mutation(self.mutate):
            for site, whole in runs:
                started, self.chunks = time.perf_counter(), 0
                with simulated_environment():
                    finding, positions, ranks_checked, boxes = self._run_site(site, whole)
                if whole and finding is None and site.graph and len(site.shape) >= 2:
                    finding, more = self._global_ops(site)
                    positions += more
                status = "OK" if finding is None else "FAIL"
                shape = f"{site.kind} {'x'.join(map(str, site.virtual_shape(layout)))} sbp {self._sbp_text(site)}"
                if whole:
                    line = (f"whole {status} {site.name} {shape}: {ranks_checked} ranks, {boxes} boxes whole, "
                            f"{self.chunks} chunks, {positions} positions compared "
                            f"({time.perf_counter() - started:.1f} s)")
                else:
                    line = (f"{status} {site.name} {shape} stages {list(site.stages)}: {ranks_checked} ranks, {boxes} "
                            f"boxes, {positions} positions compared over all ranks "
                            f"({time.perf_counter() - started:.1f} s)")
                out(line)
                lines.append(line)
                if finding is not None:
                    out(str(finding))
                    findings.append(finding)
                    if self.mutate:
                        break
        return lines, findings

    def _global_ops(self, site):
        """``check_global_ops`` at the first and last micro-batch, as a ``Finding``; the first mask site at the
        last micro-batch also inside an ``nn.Graph``."""
        count = 0
        micros = sorted({0, self.layout.micro_batches - 1}) if site.rows else [0]
        for micro in micros:
            in_graph = site.kind == "mask" and not self.graph_run and micro == micros[-1]
            self.graph_run |= in_graph
            found, n = self.check_global_ops(site, micro, in_graph)
            count += n
            if found:
                path, position, got, expected = found
                where = (f"micro-batch {micro}",) + tuple(position) if site.rows else tuple(position)
                return Finding(site.name, 0, (0, 0, 0), path, where, got, expected), count
        return None, count

    def _sbp_text(self, site):
        return "[" + ", ".join("B" if s == B else f"S({s[1]})" for s in self.layout.nd_sbp(site.sbp)) + "]"

    def _run_site(self, site, whole=False):
        layout = self.layout
        shape = tuple(site.shape)
        sbp = layout.nd_sbp(site.sbp)
        flow_sbp = oneflow_sbp(sbp)
        if site.local_dp:  # a local tensor: every rank its dp block of rows, no placement split
            sbp = [S(0)] + [B] * (len(sbp) - 1) if layout.dp > 1 and layout.tp > 1 else ([S(0)] if layout.dp > 1
                                                                                        else [B])
        points = [] if whole else boundary_points(site, layout)
        by_micro = {}
        for micro, point in points:
            by_micro.setdefault(micro, []).append(point)
        by_micro = {m: np.array(p, dtype=np.int64) for m, p in by_micro.items()}
        # whole boxes: the last micro-batch alone (its rows numbered past the step's first micro-batch)
        micros = [layout.micro_batches - 1] if whole and site.rows else \
            sorted({0, layout.micro_batches - 1}) if site.rows else [0]
        # The values a rank computes depend on its box and the micro-batch alone (the rank path after
        # shard_box is a function of them): ranks of other stages or replicas with the same box share one check.
        cache, positions, ranks_checked = {}, 0, 0
        for stage in site.stages:
            ranks = layout.stage_ranks(stage)
            hierarchy = ranks.shape
            for coordinates in itertools.product(*[range(n) for n in hierarchy]):
                rank = int(ranks[coordinates])
                _simulated_rank[0] = rank
                true_box = reference_box(shape, hierarchy, coordinates, sbp)
                if site.local_dp:
                    box = true_box
                else:
                    box = global_index.shard_box(shape, SimulatedPlacement(ranks, rank), flow_sbp)
                ranks_checked += 1
                for micro in sorted(set(micros) | set(by_micro)):
                    inside = by_micro.get(micro)
                    if inside is not None:
                        keep = np.all((inside >= true_box[0]) & (inside < true_box[1]), axis=1)
                        inside = inside[keep]
                    jobs = ([None] if micro in micros else []) + \
                        ([merge_points(inside)] if inside is not None and len(inside) else [])
                    for job in jobs:
                        key = (tuple(box[0]), tuple(box[1]), tuple(true_box[0]), micro,
                               None if job is None else tuple(job))
                        if key not in cache:
                            cache[key] = self.check_whole_box(site, box, true_box, micro, rank) if whole else \
                                self.check_box(site, ranks, rank, box, true_box, micro, job)
                        found, n = cache[key]
                        positions += n
                        if found is not None:
                            path, position, got, expected = found
                            finding = Finding(site.name, rank, self.coordinates(rank), path,
                                              (f"micro-batch {micro}",) + tuple(position) if site.rows
                                              else tuple(position), got, expected)
                            return finding, positions, ranks_checked, len(cache)
        return None, positions, ranks_checked, len(cache)


def merge_points(points):
    """Boundary points (rows of global coordinates) as small boxes ``((lo...), (hi...))``: points that differ
    only in the last coordinate, at most 4 apart, share one box (the two sides of a boundary)."""
    boxes = []
    for point in sorted(tuple(int(v) for v in p) for p in points):
        if boxes and boxes[-1][0][:-1] == point[:-1] and point[-1] - boxes[-1][0][-1] < 4:
            lo, hi = boxes[-1]
            boxes[-1] = (lo, hi[:-1] + (point[-1] + 1,))
        else:
            boxes.append((point, tuple(v + 1 for v in point)))
    return tuple(boxes)


def parse_layout(text, micro_batches):
    try:
        dp, tp, pp = (int(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"--layout {text!r}: expected dp,tp,pp (three integers), e.g. 32,8,4") from None
    if min(dp, tp, pp) < 1:
        raise ValueError(f"--layout {text!r}: every size must be at least 1")
    return Layout(dp, tp, pp, micro_batches)


def simulate(layout, model=None, sites=(), mutate=None, out=print, device="cpu", whole_boxes=True):
    """Run the simulation; returns ``(lines, findings)``.  ``device``: where the int32-op and global-op paths
    run (the host kernel and the host's values run on the CPU).  ``whole_boxes``: first every rank's whole box
    at reduced widths (``reduced_model``; a ``--site`` of up to ``WHOLE_ELEMENTS`` elements at its own)."""
    all_sites = (model_sites(model, layout) if model is not None else []) + list(sites)
    whole_sites = []
    if whole_boxes:
        whole_sites = (model_sites(reduced_model(model, layout), layout) if model is not None else []) + \
            [site for site in sites if int(np.prod(site.shape, dtype=np.int64)) <= WHOLE_ELEMENTS]
    for site in all_sites + whole_sites:
        if site.stages is None:
            site.stages = tuple(range(layout.pp))
        if site.rows and site.shape[0] % layout.dp:
            raise ValueError(f"site {site.name}: dim 0 ({site.shape[0]}) is not divisible by dp {layout.dp}")
    _device[0] = device
    try:
        return Simulation(layout, all_sites, mutate, whole_sites=whole_sites).run(out)
    finally:
        _device[0] = "cpu"
