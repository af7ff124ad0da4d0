"""The old import path of the stochastic layers, kept for a release: they live in ``libai_ext.random.layers``
(``from libai_ext.layers import Dropout`` is ``libai_ext.random.layers.Dropout``, the same class).  Owns nothing of
its own; a new script imports from ``libai_ext`` or ``libai_ext.random.layers``.  May import ``random`` only.
"""
from ..random.layers import (  # noqa: F401  (re-exported)
    DropPath, Dropout, UnkeyedGraphDraw, convert_stochastic_layers, name_stochastic_layers, stochastic_layers,
    stochastic_ops,
)
from ..random.layers import __all__  # noqa: F401
