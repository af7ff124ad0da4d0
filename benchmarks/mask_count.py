"""Dropout masks and the initial-weight re-draw: OneFlow ops and bytes COUNTED, per element and per rank and step.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/mask_count.py   (docs/scale.md reads it: benchmarks/scale_page.py)

Counting, not timing: every OneFlow op a path issues from Python (the tensor operators, ``to``, slicing and
``__setitem__``, the ``flow`` functions it calls, ``flow._C.dropout``, the host kernel) is wrapped; each call
outermost counts as one dispatch, and, unless it only makes a view (``reshape``, ``view``, ``from_numpy``,
``to_local``), as reading its tensor arguments and writing its result (a slice counted as a copy): one pass over
memory where it touches at least 1/64 of the positions (not the few per row or sample that build an index).  Paths, at each mask site's real position in GPT-3 175B on (32, 8, 4) with 4 micro-batches (the box of
rank 0, so the word index past 2**32 where the real one is), one chunk of rows of the real width:

* ``int ops``: ``counter_rng.local_keep_mask`` with the host kernel off (eager GPU ranks);
* ``graph``: ``counter_rng.keep_mask`` with a placement (the global ops ``nn.Graph`` traces, with a graph's tensor
  keys and micro-batch) on a part of rank 0's box, OneFlow's share of the global ops played by the simulator;
* ``host loop``: the same with the compiled CPU kernel (eager CPU ranks);
* ``keyed op``: ``random.keyed_op.keyed_dropout`` (what graphs, and eager ranks off the CPU, run where the op is
  built): one op forward, one backward (the same op on dy), counted on its CPU kernel;
* ``native``: ``flow._C.dropout`` (its backward, ``dropout_grad``, runs inside OneFlow's autograd where Python
  cannot wrap it: its reads and writes are its signature's, dy and the mask in, dx out);
* apply (``stochastic.apply_keep``), forward and backward through autograd.

bf16: OneFlow 0.9.0's CPU has no bf16 dropout or multiply kernels; the fp32 ops are counted and their float
tensors priced at 2 bytes.
"""
import argparse
import contextlib
import functools
import os
import sys
from unittest import mock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import oneflow as flow  # noqa: E402

from libai_ext.random import counter_rng, global_index, keyed_op  # noqa: E402
from libai_ext.random.layers import stochastic  # noqa: E402
from libai_ext.testing import simulate_layout as sim  # noqa: E402

TENSOR_OPS = ("__mul__", "__rmul__", "__sub__", "__rsub__", "__add__", "__radd__", "__floordiv__", "__truediv__",
              "__ge__", "__gt__", "__le__", "__lt__", "__eq__", "__neg__", "__getitem__", "__setitem__", "to",
              "reshape", "view", "to_local", "sum")
FLOW_OPS = ("arange", "zeros", "ones", "empty", "empty_like", "full", "cat", "tensor", "from_numpy", "where", "clamp",
            "sqrt", "log", "cos", "split")
VIEWS = {"reshape", "view", "to_local", "from_numpy", "split", "empty", "empty_like"}  # no pass (empty: no write)
LAYOUT = sim.Layout(32, 8, 4, 4)
MODEL = sim.MODELS["gpt3-175b"]
RATE = 0.1


def _nbytes(t, bf16):
    if not isinstance(t, flow.Tensor):
        return 0
    size = t.numel() * (2 if bf16 and t.dtype in (flow.float32, flow.float16, flow.bfloat16) else t.element_size())
    return int(size)


class Counter:
    """Dispatches, passes and bytes (fp32 and bf16 pricing) of the OneFlow ops issued inside ``counting()``."""

    def __init__(self):
        self.dispatches = 0
        self.sizes = []  # per op not a view: the elements of its largest tensor
        self.bytes = {False: 0, True: 0}
        self.depth = 0

    def passes(self, elements):
        """Ops over at least 1/64 of ``elements`` (the ops on a few positions per row or per sample that build an
        index or a key are dispatches, not passes over memory)."""
        return sum(1 for size in self.sizes if 64 * size >= elements)

    def record(self, name, args, out):
        self.dispatches += 1
        if name in VIEWS:
            return
        tensors = [a for a in args if isinstance(a, flow.Tensor)]
        if isinstance(out, (tuple, list)):
            outs = [o for o in out if isinstance(o, flow.Tensor)]
        else:
            outs = [out] if isinstance(out, flow.Tensor) else []
        if name == "__setitem__":  # reads the value, writes as many positions
            outs = tensors[1:] if len(tensors) > 1 else []
            tensors = tensors[1:]
        self.sizes.append(max([int(t.numel()) for t in tensors + outs] or [0]))
        for bf16 in (False, True):
            self.bytes[bf16] += sum(_nbytes(t, bf16) for t in tensors + outs)

    def wrap(self, name, real):
        @functools.wraps(real)
        def counted(*args, **kwargs):
            self.depth += 1
            try:
                out = real(*args, **kwargs)
            finally:
                self.depth -= 1
            if self.depth == 0:
                self.record(name, list(args) + list(kwargs.values()), out)
            return out
        return counted


@contextlib.contextmanager
def counting(host_kernel=False):
    """A ``Counter`` of the ops issued inside; ``host_kernel``: ``_counter_kernel`` on (its call counted as one
    pass writing its 1-byte mask)."""
    counter = Counter()
    saved = {}
    for name in TENSOR_OPS:
        saved[(flow.Tensor, name)] = getattr(flow.Tensor, name)
        setattr(flow.Tensor, name, counter.wrap(name, saved[(flow.Tensor, name)]))
    for name in FLOW_OPS:
        saved[(flow, name)] = getattr(flow, name)
        setattr(flow, name, counter.wrap(name, saved[(flow, name)]))
    for owner, name in ((flow._C, "dropout"), (keyed_op, "_dispatch")):
        saved[(owner, name)] = getattr(owner, name)
        setattr(owner, name, counter.wrap(name, saved[(owner, name)]))
    kernel = counter_rng._counter_kernel
    if host_kernel and kernel is not None:
        class Kernel:
            @staticmethod
            def keep_mask(values, *args):
                kernel.keep_mask(values, *args)
                counter.record("host loop", [], flow.from_numpy(values))
        counter_rng._counter_kernel = Kernel
    elif not host_kernel:
        counter_rng._counter_kernel = None
    try:
        yield counter
    finally:
        counter_rng._counter_kernel = kernel
        for (owner, name), real in saved.items():
            setattr(owner, name, real)


def mask_sites():
    """``{site name: (site, uses per rank and step)}``: rank 0's mask sites (stage 0) of GPT-3 at (32, 8, 4); per
    layer one attention-probability dropout and two hidden-state ones, the embedding dropout once, per micro-batch."""
    layers = MODEL.layers // LAYOUT.pp
    uses = {"attention-probs dropout": layers, "hidden dropout": 2 * layers, "embedding dropout": 1}
    return {site.name: (site, uses[site.name] * LAYOUT.micro_batches)
            for site in sim.model_sites(MODEL, LAYOUT) if site.kind == "mask"}


def rank_box(site):
    ranks = LAYOUT.stage_ranks(0)
    return global_index.shard_box(tuple(site.shape), sim.SimulatedPlacement(ranks, 0),
                                  sim.oneflow_sbp(LAYOUT.nd_sbp(site.sbp)))


def count_chunk(site, path, device_type="cuda"):
    """One chunk of ``site``'s rank-0 box at its real position (the last micro-batch's rows), counted:
    ``(elements, mask Counter, apply forward Counter, apply backward Counter)``."""
    rows = sim.rows_of(site, LAYOUT, LAYOUT.micro_batches - 1)
    keys = counter_rng.derive_keys(1, "count", site.name)
    with sim.simulated_environment():
        lo, hi = rank_box(site)
    columns = site.shape[-1]
    words_per_row = (columns + 1) // 2
    # one chunk: as many whole rows as chunk_words of this device type holds, at most 4096 words (counts per
    # element do not depend on the chunk's length; the whole rank box's chunks are counted by ``mask_chunks``)
    rows_in_chunk = max(1, min(4096, counter_rng.chunk_words(device_type)) // words_per_row)
    hi = list(hi)
    last_lead = max(d for d in range(len(lo) - 1) if hi[d] - lo[d] > 1)
    for d in range(len(lo) - 1):
        hi[d] = lo[d] + 1
    hi[last_lead] = lo[last_lead] + min(rows_in_chunk, site.shape[last_lead] - lo[last_lead])
    if path == "graph":
        lo, hi = graph_window(site, lo)
    x = flow.ones([b - a for a, b in zip(lo, hi)], dtype=flow.float32, requires_grad=True)
    elements = x.numel()
    with sim.simulated_environment():
        if path == "native":
            with counting() as mask:
                y = flow._C.dropout(x, RATE, True, False, flow.Generator())
            return elements, mask, None, None
        if path == "keyed op":
            with counting() as mask:
                y = keyed_op.keyed_dropout(x, keys, counter_rng.keep_level(RATE), stochastic.dropout_scale(RATE))
            dy = flow.ones(y.shape)
            with counting() as backward:
                y.backward(dy)
            return elements, mask, None, backward
        if path == "graph":
            keep, mask = count_graph_mask(site, lo, hi, keys, rows)
        else:
            with counting(host_kernel=path == "host loop") as mask:
                keep = counter_rng.local_keep_mask(tuple(site.shape), lo, hi, keys, RATE, "cpu", rows)
    # a graph traces the apply step whole (``stochastic._masked`` on a lazy tensor): no chunks, as for one eager chunk
    whole = dict.fromkeys(stochastic.APPLY_CHUNK, x.numel()) if path == "graph" else {}
    with counting() as forward, mock.patch.dict(stochastic.APPLY_CHUNK, whole):
        y = stochastic.apply_keep(x, keep, stochastic.dropout_scale(RATE))
    dy = flow.ones(y.shape)
    with counting() as backward, mock.patch.dict(stochastic.APPLY_CHUNK, whole):
        y.backward(dy)
    return elements, mask, forward, backward


def graph_window(site, lo):
    """The part of rank 0's box that the graph path is counted on: one position of each dimension the path indexes
    alone (split over ranks, or dim 0 under accumulation), the whole of the trailing ones it merges (as a rank does)."""
    sbp = sim.oneflow_sbp(LAYOUT.nd_sbp(site.sbp))
    placement = sim.SimulatedPlacement(LAYOUT.stage_ranks(0), 0)
    alone = global_index._split_dims(len(site.shape), placement, sbp) | {0}
    box_lo = [lo[d] if d in alone else 0 for d in range(len(site.shape))]
    return box_lo, [a + 1 if d in alone else site.shape[d] for d, a in enumerate(box_lo)]


def count_graph_mask(site, lo, hi, keys, rows):
    """``counter_rng.keep_mask`` with a placement (the global ops ``nn.Graph`` traces, a graph's tensor keys and
    micro-batch) on rank 0's positions ``[lo, hi)``, OneFlow's part of the global ops played by the simulator:
    ``(keep, Counter)``."""
    shape = tuple(site.shape)
    words = shape[:-1] + ((shape[-1] + 1) // 2,)
    window = [list(range(a, b)) for a, b in zip(lo[:-1], hi[:-1])] + [list(range(words[-1]))]
    sbp = sim.oneflow_sbp(LAYOUT.nd_sbp(site.sbp))
    placement = sim.SimulatedPlacement(LAYOUT.stage_ranks(0), 0, window)
    sim._current_window[0] = (window, words)
    traced_keys = tuple(flow.tensor([k], dtype=flow.int32) for k in keys[:2]) + tuple(keys[2:])
    traced_rows = rows and global_index.StepRows(rows.micro_batches, flow.tensor([rows.micro], dtype=flow.int32))
    with counting() as mask:
        keep = counter_rng.keep_mask(shape, RATE, traced_keys, placement, sbp, rows=traced_rows)
    return keep, mask


def launches_per_step(site, mask_ops, apply_ops, device_type="cuda"):
    """Eager launches of one use of ``site`` on rank 0: chunks of its box (``mask_chunks``) times the ops of a
    chunk, and the apply step's chunks (forward and backward) times theirs."""
    lo, hi = rank_box(site)
    matrix, lo, hi, _ = counter_rng._as_matrix(site.shape, lo, hi)
    _, _, hashed = counter_rng._column_halves(matrix[-1], lo[-1], hi[-1])
    chunks = len(counter_rng.mask_chunks(lo[:-1], hi[:-1], hashed, counter_rng.chunk_words(device_type)))
    elements = int(np.prod([b - a for a, b in zip(lo, hi)], dtype=np.int64))
    apply_chunks = len(stochastic.apply_chunks(elements, stochastic.APPLY_CHUNK[device_type]))
    return chunks, chunks * mask_ops + apply_chunks * apply_ops, elements


def init_counts(shape=(64, 1536)):
    """The initial-weight re-draw of one shard (``counter_normal`` on two streams, cast to float32), counted."""
    keys = (counter_rng.derive_keys(1, "param_init", "w", 0), counter_rng.derive_keys(1, "param_init", "w", 1))
    with counting() as counter:
        counter_rng.counter_normal(shape, keys, device="cpu").to(flow.float32)
    return int(np.prod(shape)), counter


PATHS = ("int ops", "graph", "host loop", "keyed op", "native")


def count_all():
    """Everything the page and scale.md read: ``{"sites": {...}, "init": {...}}``."""
    sites = {}
    for name, (site, uses) in mask_sites().items():
        row = {"uses": uses, "shape": tuple(site.shape)}
        for path in PATHS:
            elements, mask, forward, backward = count_chunk(site, path)
            entry = {"passes": mask.passes(elements), "dispatches": mask.dispatches,
                     "bytes": {k: mask.bytes[k] / elements for k in (False, True)}}
            if forward is None and backward is not None:  # the keyed op: mask and apply in its one op each way
                entry["backward"] = {"passes": backward.passes(elements), "dispatches": backward.dispatches,
                                     "bytes": {k: backward.bytes[k] / elements for k in (False, True)}}
            if forward is not None:
                entry["apply"] = {"passes": forward.passes(elements) + backward.passes(elements),
                                  "dispatches": forward.dispatches + backward.dispatches,
                                  "forward bytes": {k: forward.bytes[k] / elements for k in (False, True)},
                                  "backward bytes": {k: backward.bytes[k] / elements for k in (False, True)}}
            row[path] = entry
        ops = row["int ops"]
        row["chunks"], row["launches"], row["elements"] = launches_per_step(site, ops["dispatches"],
                                                                            ops["apply"]["dispatches"])
        sites[name] = row
    elements, counter = init_counts()
    init = {"passes": counter.passes(elements), "dispatches": counter.dispatches,
            "bytes": {k: counter.bytes[k] / elements for k in (False, True)}}
    return {"sites": sites, "init": init}


def native_backward_bytes(bf16):
    """``dropout_grad``'s signature: dy and the 1-byte mask read, dx written."""
    return 2 * (2 if bf16 else 4) + 1


def step_bytes(counts, path, bf16):
    """Bytes one rank moves per step on ``path``: every mask site's uses x elements x (mask + apply fwd + bwd)."""
    total = 0
    for row in counts["sites"].values():
        e = row[path]
        if path == "native":
            per = e["bytes"][bf16] + 1 + native_backward_bytes(bf16)
        elif path == "keyed op":
            per = e["bytes"][bf16] + e["backward"]["bytes"][bf16]
        else:
            per = e["bytes"][bf16] + e["apply"]["forward bytes"][bf16] + e["apply"]["backward bytes"][bf16]
        total += row["uses"] * row["elements"] * per
    return total


def table(counts):
    lines = ["| site (rank 0's box) | path | passes (mask + apply fwd/bwd) | bytes/elem fp32: mask, apply fwd, bwd "
             "| bf16 | chunks per use | eager launches per step |", "|---|---|---|---|---|---|---|"]
    for name, row in counts["sites"].items():
        for path in PATHS:
            e = row[path]
            if path == "keyed op":  # mask and apply: one op forward, one backward
                b = e["backward"]
                fp = f"{e['bytes'][False]:.0f} (fwd), {b['bytes'][False]:.0f} (bwd)"
                bf = f"{e['bytes'][True]:.0f}, {b['bytes'][True]:.0f}"
                passes = f"{e['passes']} + {b['passes']} (bwd)"
            elif path == "native":  # + the 1-byte mask the op keeps inside (its Python result is y alone)
                fp = f"{e['bytes'][False]:.0f} + 1 (fwd), {native_backward_bytes(False)} (bwd)"
                bf = f"{e['bytes'][True]:.0f} + 1, {native_backward_bytes(True)}"
                passes = f"{e['passes']} + 1 (bwd)"
            else:
                a = e["apply"]
                fp = f"{e['bytes'][False]:.0f}, {a['forward bytes'][False]:.0f}, {a['backward bytes'][False]:.0f}"
                bf = f"{e['bytes'][True]:.0f}, {a['forward bytes'][True]:.0f}, {a['backward bytes'][True]:.0f}"
                passes = f"{e['passes']} + {a['passes']}"
            extra = (f"| {row['chunks']} | {row['launches'] * row['uses']:,} |" if path == "int ops" else "| | |")
            lines.append(f"| {name} {'x'.join(map(str, row['shape']))} x{row['uses']} | {path} | {passes} | {fp} | {bf} "
                         + extra)
    init = counts["init"]
    lines.append(f"| initial-weight re-draw | int ops | {init['passes']} | {init['bytes'][False]:.0f} "
                 f"| {init['bytes'][True]:.0f} | | |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the table to this file (docs/scale.md quotes the counts)")
    args = parser.parse_args()
    from report import publish  # benchmarks/report.py
    counts = count_all()
    total = sum(row["launches"] * row["uses"] for row in counts["sites"].values())
    text = (table(counts) + f"\n\nEager launches per rank and step (int ops, CUDA chunk sizes): {total:,}.\n")
    publish(text, args.out, title="Dropout masks and the initial-weight re-draw: ops and bytes counted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
