"""SBP-correct stochastic layers (drop-in for flow.nn.Dropout and libai.layers.DropPath).

Their randomness (modes, seed, streams) belongs to ``libai_ext.random``.
"""
from .graph_calls import GraphCalls
from .stochastic import DropPath, Dropout, name_stochastic_layers, stochastic_layers

__all__ = ["DropPath", "Dropout", "GraphCalls", "name_stochastic_layers", "stochastic_layers"]
