"""Per-rank random state (python, numpy, every OneFlow generator) saved with LiBai checkpoints.

LiBai's ``Checkpointer`` saves the model and optimizer once (rank 0), but every rank
has its own python/numpy/OneFlow generator state: augmentation draws from them.
``RNGStateCheckpointer`` writes each rank's state beside the checkpoint it belongs
to (``<output_dir>/rng_state/<checkpoint name>/rank_<r>.pkl``; LiBai loads every
entry *inside* a checkpoint folder as a OneFlow object) and restores it on resume.
Per-module streams (``libai_ext.random.layers``) are buffers and travel with the model;
the sampler position comes from LiBai's ``consumed_samples``.

OneFlow 0.9.0 keeps one default generator per device: ``flow.default_generator`` (CPU,
what ``flow.get_rng_state`` reads) and one per CUDA device, reached only through
``flow._oneflow_internal.default_generator("cuda:<i>")`` (0.9.0 has no
``flow.cuda.get_rng_state``).  A rank draws on the CPU and on its own CUDA device only
(``devices``): those two are saved and restored, under ``"cpu"`` and ``"cuda"``; the other
GPUs of the host are never touched.  Files of libai_ext 0.1 (every device under ``"cuda:<i>"``)
restore this rank's device from its own entry.

Resuming under another layout (``(2, 2, 2)`` -> 1 rank, 1 rank -> ``tp2``): per-rank files
cannot follow, there is no rank ``r`` of the old layout for every new rank.  Under
``train.randomness="layout_invariant"`` training draws nothing that depends on them (masks,
augmentation and mixup are keyed by seed, step and sample), and with ``train.seed_scope="global"``
every rank holds the same streams anyway, so every rank resumes rank 0's state: the layout-free
one.  In ``"fast"`` mode a layout change is refused in a warning (the masks cannot repeat).

A limit of OneFlow 0.9.0 itself: its CPU generator's state holds the Mersenne Twister's
624 words but not the position within them, so a restored CPU generator repeats the
saved draws only from a block boundary (right after seeding, or 624 words later).
"""
import contextlib
import logging
import os
import pickle
import random

import numpy as np
import oneflow as flow
from libai.utils.checkpoint import Checkpointer

from ..compat.layout import parallel_layout
from . import modes
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

    ``saved`` may also be a bare array, as written by libai_ext 0.1.0 (the CPU generator only).
    A generator saved but absent here, or present but not saved, is named in a warning:
    its draws will not repeat the saved run's.
    """
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


class RNGStateCheckpointer(Checkpointer):
    """LiBai's Checkpointer plus every rank's random state, saved and resumed with it."""

    def rng_state_file(self, checkpoint_path, rank=None):
        name = os.path.basename(os.path.normpath(checkpoint_path))
        rank = flow.env.get_rank() if rank is None else rank
        return os.path.join(self.save_dir, "rng_state", name, f"rank_{rank}.pkl")

    def save(self, name, **kwargs):
        super().save(name, **kwargs)
        self.save_random_state(name)

    def save_random_state(self, name):
        """Write this rank's random state for checkpoint ``name`` (after LiBai wrote the rest)."""
        path = self.rng_state_file(name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            pickle.dump(dict(capture_rng_state(), layout=parallel_layout()), f)
            f.flush()
            os.fsync(f.fileno())

    def load(self, path, checkpointables=None):
        extra = super().load(path, checkpointables)
        # checkpointables=[] means "weights only" (LiBai's load_weight), not a resume.
        if path and checkpointables is None:
            self._restore(path)
        return extra

    def _restore(self, path):
        own, first = self.rng_state_file(path), self.rng_state_file(path, rank=0)
        if not os.path.exists(first):
            logger.warning(f"no random state at {first}: resumed randomness will not repeat the interrupted run")
            return
        here = parallel_layout()
        state = _read(own) if os.path.exists(own) else None
        if state is not None and state.get("layout", here) == here:
            restore_rng_state(state)
            return
        saved = _read(first).get("layout")
        if modes.randomness() != "layout_invariant":
            logger.warning(f"resuming a {saved} checkpoint under {here} with train.randomness="
                           f"{modes.randomness()!r}: per-rank random streams cannot follow a layout change, "
                           "the resumed run will not repeat the interrupted one (use 'layout_invariant')")
            if state is not None:
                restore_rng_state(state)
            return
        logger.info(f"resuming a {saved} checkpoint under {here}: every rank takes rank 0's random state "
                    "(layout_invariant)")
        restore_rng_state(_read(first))


def _read(state_file):
    try:
        with open(state_file, "rb") as f:
            state = pickle.load(f)
    except Exception as e:  # a truncated or overwritten file: say which one
        raise ValueError(f"rank {flow.env.get_rank()}: the random state {state_file} cannot be read "
                         f"({type(e).__name__}: {e})") from None
    if not isinstance(state, dict) or "python" not in state:
        raise ValueError(f"rank {flow.env.get_rank()}: {state_file} holds no random state")
    return state
