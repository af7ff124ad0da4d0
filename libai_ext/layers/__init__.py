"""SBP-correct stochastic layers (drop-in for flow.nn.Dropout and libai.layers.DropPath).

Their randomness (modes, seed, streams) belongs to ``libai_ext.random``.
"""
from . import stochastic_ops
from .conversion import convert_stochastic_layers
from .graph_calls import UnkeyedGraphDraw
from .stochastic import DropPath, Dropout, name_stochastic_layers, stochastic_layers

__all__ = ["DropPath", "Dropout", "UnkeyedGraphDraw", "convert_stochastic_layers", "name_stochastic_layers",
           "stochastic_layers", "stochastic_ops"]
