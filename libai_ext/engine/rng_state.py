"""Per-rank random state (python, numpy, OneFlow) saved with LiBai checkpoints.

LiBai's ``Checkpointer`` saves the model and optimizer once (rank 0), but every rank
has its own python/numpy/OneFlow generator state: augmentation draws from them.
``RNGStateCheckpointer`` writes each rank's state beside the checkpoint it belongs
to (``<output_dir>/rng_state/<checkpoint name>/rank_<r>.pkl``; LiBai loads every
entry *inside* a checkpoint folder as a OneFlow object) and restores it on resume.
Per-module streams (``libai_ext.layers``) are buffers and travel with the model;
the sampler position comes from LiBai's ``consumed_samples``.
"""
import contextlib
import logging
import os
import pickle
import random

import numpy as np
import oneflow as flow
from libai.utils.checkpoint import Checkpointer

logger = logging.getLogger(__name__)


def capture_rng_state():
    return {"python": random.getstate(), "numpy": np.random.get_state(),
            "oneflow": flow.get_rng_state().numpy()}


def restore_rng_state(state):
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    flow.set_rng_state(flow.tensor(state["oneflow"], dtype=flow.uint8))


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

    @classmethod
    def wrapping(cls, checkpointer):
        return cls(checkpointer.model, checkpointer.save_dir, save_to_disk=checkpointer.save_to_disk,
                   **checkpointer.checkpointables)

    def rng_state_file(self, checkpoint_path):
        name = os.path.basename(os.path.normpath(checkpoint_path))
        return os.path.join(self.save_dir, "rng_state", name, f"rank_{flow.env.get_rank()}.pkl")

    def save(self, name, **kwargs):
        super().save(name, **kwargs)
        path = self.rng_state_file(name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            pickle.dump(capture_rng_state(), f)

    def load(self, path, checkpointables=None):
        extra = super().load(path, checkpointables)
        # checkpointables=[] means "weights only" (LiBai's load_weight), not a resume.
        if path and checkpointables is None:
            self._restore(path)
        return extra

    def _restore(self, path):
        state_file = self.rng_state_file(path)
        if not os.path.exists(state_file):
            logger.warning(f"no random state for rank {flow.env.get_rank()} at {state_file}: "
                           "resumed randomness will not repeat the interrupted run")
            return
        with open(state_file, "rb") as f:
            restore_rng_state(pickle.load(f))
