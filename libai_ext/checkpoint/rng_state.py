"""Every rank's random state saved with LiBai's checkpoints, and restored on resume.

LiBai saves the model and optimizer once (rank 0), but each rank has its own python/numpy/OneFlow generators
(``random.rng_state``), which augmentation draws from. ``RNGStateCheckpointer`` writes them to
``<output_dir>/rng_state/<checkpoint name>/rank_<r>.pkl``: LiBai loads every entry *inside* a checkpoint folder as a
OneFlow object. Per-rank files cannot follow a layout change, so every rank then resumes rank 0's state, which under
``train.randomness="layout_invariant"`` (or ``train.seed_scope="global"``) is all training depends on; ``"fast"``
warns (docs/resume.md).
"""
import logging
import os
import pickle

import oneflow as flow
from libai.utils.checkpoint import Checkpointer

from ..compat.layout import parallel_layout
from ..random import modes
from ..random.rng_state import capture_rng_state, restore_rng_state

logger = logging.getLogger(__name__)


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
