"""Per-rank random state (python, numpy, every OneFlow generator): captured, restored, preserved around a block.

``checkpoint.rng_state.RNGStateCheckpointer`` saves it with LiBai's checkpoints; per-module streams
(``libai_ext.random.layers``) are buffers that travel with the model, the sampler position is LiBai's
``consumed_samples``. OneFlow 0.9.0 keeps one default generator per device, a CUDA one reachable only through
``flow._oneflow_internal.default_generator("cuda:<i>")`` (no ``flow.cuda.get_rng_state``). A rank draws on the CPU
and its own CUDA device only (``devices``): those two are saved under ``"cpu"`` and ``"cuda"``; a libai_ext 0.1 file
(every device under ``"cuda:<i>"``) restores this rank's device from its own entry. A restored CPU generator repeats
the saved draws only from a Mersenne Twister block boundary (docs/upstream-bugs.md §15).
"""
import contextlib
import logging
import random

import numpy as np
import oneflow as flow

from .devices import cuda_device_count, own_cuda_device  # noqa: F401  (cuda_device_count: public API)
from .oneflow_draws import finish_queued_draws

logger = logging.getLogger(__name__)


def oneflow_generators():
    """``{"cpu": generator, "cuda": generator}``: the OneFlow generators this rank draws from
    (``"cuda"``: its own device's, on a CUDA host only)."""
    generators = {"cpu": flow.default_generator}
    device = own_cuda_device()
    if device is not None:
        generators["cuda"] = flow._oneflow_internal.default_generator(f"cuda:{device}")
    return generators


def _own_entries(saved):
    """``saved`` keyed "cpu"/"cuda"; a libai_ext 0.1 file's "cuda:<i>" entries give this rank's device."""
    if isinstance(saved, np.ndarray):  # libai_ext 0.1.0: the CPU generator only
        return {"cpu": saved}
    entries = {name: state for name, state in saved.items() if not name.startswith("cuda:")}
    device = own_cuda_device()
    if "cuda" not in entries and device is not None and f"cuda:{device}" in saved:
        entries["cuda"] = saved[f"cuda:{device}"]
    return entries


def capture_oneflow_state(generators=None):
    generators = oneflow_generators() if generators is None else generators
    finish_queued_draws()
    return {name: generator.get_state().numpy() for name, generator in generators.items()}


def restore_oneflow_state(saved, generators=None):
    """Set each generator to its saved state; returns the names restored.

    ``saved`` may be a bare array (libai_ext 0.1.0: the CPU generator only). A generator saved but absent here, or
    present but not saved, is named in a warning: its draws will not repeat the saved run's."""
    saved = _own_entries(saved)
    generators = oneflow_generators() if generators is None else generators
    finish_queued_draws()
    for name in sorted(set(saved) & set(generators)):
        generators[name].set_state(flow.tensor(saved[name], dtype=flow.uint8))
    problems = [f"{name}: not in the saved state" for name in sorted(set(generators) - set(saved))]
    problems += [f"{name}: saved, but this process has no such device" for name in sorted(set(saved) - set(generators))]
    if problems:
        logger.warning("OneFlow generators not restored (their draws will differ from the saved run's): "
                       + "; ".join(problems))
    return sorted(set(saved) & set(generators))


def capture_rng_state():
    return {"python": random.getstate(), "numpy": np.random.get_state(), "oneflow": capture_oneflow_state()}


def restore_rng_state(state):
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    restore_oneflow_state(state["oneflow"])


@contextlib.contextmanager
def preserved_rng_state():
    """Whatever runs inside (e.g. an evaluation) leaves the training streams untouched."""
    state = capture_rng_state()
    try:
        yield
    finally:
        restore_rng_state(state)
