"""Efficiency-first randomness ("fast"): OneFlow's native kernels, one seed per shard.

OneFlow 0.9.0's ``dropout`` (and ``rand``) on a global tensor draw each rank's local part
from the generator they are given, whatever the sbp.  Seeding that generator from
(seed, stream, call, *this rank's coordinates on the hierarchy axes where the sbp splits*)
makes the native kernel SBP-correct at native speed, with no communication:

* ranks that differ only on ``B`` / ``P`` axes hold replicas: same coordinates, same seed,
  the same mask;
* ranks on different ``S`` coordinates hold different shards: different seeds.

Masks are reproducible on the same layout, device type and, on CUDA, GPU model (OneFlow's CUDA
kernels size their launch grid by the SM count); unlike ``counter_rng``, they change with the layout.

Generators: one per (device, stream) on each rank, created at the stream's first call and
re-seeded at every call, never one per call.  A CUDA generator allocates device memory for its
curand states when created and frees it when dropped (``cudaFree`` waits for the device): a
generator per call paid both on every dropout.  Re-seeding a shared generator is safe under
OneFlow 0.9.0's asynchronous eager execution, where a kernel reads its generator only when it
runs: ``Generator.manual_seed`` first waits until every op this rank queued has run
(``Generator::set_current_seed`` synchronises OneFlow's virtual machine, and a CUDA generator's
also its device), so a queued dropout never sees the next call's seed.  Each call's mask stays a
pure function of (seed, stream, call, shard): a resumed run draws the same masks from the call
counters its checkpoint holds, with no generator state to save.

That wait is this mode's cost: every seeding, ``get_state`` and ``set_state`` of a OneFlow 0.9.0
generator waits for the rank's queued work (``tools/repro/generator_seed_sync.py``), so each
dropout call gives up the overlap of Python with execution; on a whole step this mode is no
faster than "layout_invariant" (``benchmarks/step_profile.py``, docs/benchmarks.md).
"""
import oneflow as flow

from .devices import own_cuda_device
from .global_index import placement_coordinates
from .keys import key

_generators = {}  # (device, stream) -> flow.Generator, this process's


def shard_coordinates(placement, sbp):
    """``((axis, coordinate), ...)`` of this rank on the axes where ``sbp`` splits.

    ``()`` for a fully replicated layout; ``None`` when this rank is outside ``placement``
    (it holds no data, any seed will do).
    """
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

    The seed is the ``key`` of (seed, stream, call, shard coordinates).  The generator is created at
    the stream's first call on ``device`` and re-seeded at each later one.
    """
    generator = _generators.get((device, stream))
    if generator is None:
        generator = _generators[(device, stream)] = flow.Generator(device=device)
    generator.manual_seed(key(seed, stream, call, coordinates) >> 1)  # OneFlow wants a non-negative int64
    return generator
