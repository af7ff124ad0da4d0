"""SBP-correct stochastic layers (drop-in for flow.nn.Dropout and libai.layers.DropPath).

Their randomness (modes, seed, streams) belongs to ``libai_ext.random``; the routing of OneFlow's random ops
inside a forward (``stochastic_ops``, ``random_ops``) and the layers' draws inside ``nn.Graph`` (``graph_calls``)
live here.  May import ``random`` and ``compat``.
"""
from . import stochastic_ops
from .conversion import convert_stochastic_layers
from .graph_calls import UnkeyedGraphDraw
from .stochastic import DropPath, Dropout, name_stochastic_layers, stochastic_layers

__all__ = ["DropPath", "Dropout", "UnkeyedGraphDraw", "convert_stochastic_layers", "name_stochastic_layers",
           "stochastic_layers", "stochastic_ops"]
