"""Which global random streams a call draws from: python ``random``, numpy's, OneFlow's CPU generator.

``streams_drawn_by(fn, *args)`` runs ``fn`` once from freshly seeded streams, names each stream whose state moved and
puts the caller's streams back.  One run sees only its own draws: a call that draws only sometimes can pass.
"""
import random

import numpy as np
import oneflow as flow

from .keyed_dataset import finish_queued_work, preserved_streams

_PROBE_SEED = 12345


def _states():
    numpy_state = np.random.get_state()
    return {"python random": random.getstate(),
            "numpy.random": (numpy_state[1].tobytes(), numpy_state[2:]),
            "oneflow (CPU generator)": flow.default_generator.get_state().numpy().tobytes()}


def streams_drawn_by(fn, *args):
    """The names of the global streams ``fn(*args)`` draws from (empty if none)."""
    with preserved_streams():
        random.seed(_PROBE_SEED)
        np.random.seed(_PROBE_SEED)
        flow.default_generator.manual_seed(_PROBE_SEED)
        before = _states()
        fn(*args)
        finish_queued_work()  # a queued draw advances the generator when it runs
        after = _states()
    return [name for name in before if before[name] != after[name]]
