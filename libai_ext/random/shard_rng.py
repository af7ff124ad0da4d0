"""Efficiency-first randomness ("fast"): OneFlow's native kernels, one seed per shard.

OneFlow 0.9.0's ``dropout`` (and ``rand``) on a global tensor draw each rank's local part from the generator given,
whatever the sbp. Seeding it from (seed, stream, call, *this rank's coordinates on the axes where the sbp splits*)
makes the native kernel SBP-correct with no communication: replicas (``B``/``P`` axes) share a seed and a mask,
shards (``S``) differ. Masks repeat on the same layout, device type and, on CUDA, GPU model (OneFlow's CUDA kernels
size their launch grid by the SM count); unlike ``counter_rng``'s, they change with the layout.

One generator per (device, stream) on each rank, created at the stream's first call and re-seeded at every call: a
CUDA generator allocates its curand states when created and frees them when dropped (``cudaFree`` waits for the
device). Re-seeding a shared generator is safe under asynchronous eager execution, where a kernel reads its generator
only when it runs: ``Generator.manual_seed`` first waits for every op the rank queued (a CUDA generator's, also its
device). Each mask is a pure function of (seed, stream, call, shard): a resume draws it again from the checkpoint's
call counters, with no generator state to save. That wait is this mode's cost: on a whole step it is no faster than
"layout_invariant" (docs/upstream-bugs.md §19, docs/benchmarks.md).
"""
import oneflow as flow

from .devices import own_cuda_device
from .global_index import placement_coordinates
from .draws import key

_generators = {}  # (device, stream) -> flow.Generator, this process's


def shard_coordinates(placement, sbp):
    """``((axis, coordinate), ...)`` of this rank on the axes where ``sbp`` splits.

    ``()`` for a fully replicated layout; ``None`` outside ``placement`` (no data: any seed will do)."""
    _, coordinates = placement_coordinates(placement)
    if coordinates is None:
        return None
    return tuple((axis, coordinates[axis]) for axis, s in enumerate(sbp)
                 if s not in (flow.sbp.broadcast, flow.sbp.partial_sum))


def local_device(x):
    """The device of this rank's part of ``x``: ``"cpu"`` or ``"cuda:<i>"`` (a global CUDA tensor's
    part lives on this rank's own device)."""
    if x.is_global:
        return "cpu" if x.placement.type == "cpu" else f"cuda:{own_cuda_device()}"
    device = x.device
    return "cpu" if device.type == "cpu" else f"{device.type}:{device.index}"


def shard_generator(device, seed, stream, call, coordinates):
    """This rank's generator of ``stream`` on ``device``, seeded for one call.

    Seeded with the ``key`` of (seed, stream, call, shard coordinates); made at the stream's first call on ``device``.
    """
    generator = _generators.get((device, stream))
    if generator is None:
        generator = _generators[(device, stream)] = flow.Generator(device=device)
    generator.manual_seed(key(seed, stream, call, coordinates) >> 1)  # OneFlow wants a non-negative int64
    return generator
