"""Which randomness mode and seed the stochastic layers follow (set by ``seed_everything``).

* ``"layout_invariant"``: every draw is a pure function of (seed, what it is for, counter,
  global position); the same values on 1 rank and on any (dp, tp, pp) layout.
* ``"fast"``: OneFlow's native kernels, seeded per shard; reproducible on one layout only.
"""

RANDOMNESS_MODES = ("layout_invariant", "fast")
DEFAULT_RANDOMNESS = "layout_invariant"
_layer_seed = 0
_randomness = DEFAULT_RANDOMNESS


def check_randomness(mode, key="train.randomness"):
    if mode not in RANDOMNESS_MODES:
        raise ValueError(f"{key}={mode!r} is not one of {RANDOMNESS_MODES}")
    return mode


def set_layer_seed(seed, randomness=None):
    """The seed (and mode) of every stochastic layer's stream (``seed_everything`` calls this)."""
    global _layer_seed, _randomness
    _layer_seed = int(seed)
    if randomness is not None:
        _randomness = check_randomness(randomness)


def layer_seed():
    return _layer_seed


def randomness():
    """The mode layers without their own ``randomness`` use."""
    return _randomness


def layout_invariant():
    """Whether the current ``train.randomness`` is ``"layout_invariant"``."""
    return randomness() == "layout_invariant"
