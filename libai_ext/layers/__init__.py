"""SBP-correct stochastic layers (drop-in for flow.nn.Dropout and libai.layers.DropPath)."""
from .counter_rng import counter_uniform, derive_keys, global_index
from .stochastic import DropPath, Dropout, layer_seed, name_stochastic_layers, set_layer_seed

__all__ = ["DropPath", "Dropout", "counter_uniform", "derive_keys", "global_index", "layer_seed",
           "name_stochastic_layers", "set_layer_seed"]
