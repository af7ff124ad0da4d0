"""SBP-correct stochastic layers (drop-in for flow.nn.Dropout and libai.layers.DropPath)."""
from .counter_rng import counter_bits, counter_uniform, derive_keys, keep_mask
from .shard_rng import shard_coordinates, shard_generator
from .stochastic import (
    DEFAULT_RANDOMNESS, RANDOMNESS_MODES, DropPath, Dropout, check_randomness, layer_seed, name_stochastic_layers,
    randomness, set_layer_seed,
)

__all__ = ["DEFAULT_RANDOMNESS", "RANDOMNESS_MODES", "DropPath", "Dropout", "check_randomness", "counter_bits",
           "counter_uniform", "derive_keys", "keep_mask", "layer_seed", "name_stochastic_layers", "randomness",
           "set_layer_seed", "shard_coordinates", "shard_generator"]
