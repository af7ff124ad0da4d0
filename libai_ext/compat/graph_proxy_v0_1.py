"""LiBai 0.1.1's graph code on OneFlow 0.9.0: ``proxy.origin`` and ``proxy.config``.

LiBai 0.1.1 targets OneFlow 0.8, whose graph ``Block`` had ``.origin`` (the module) and ``.config`` (``stage_id``,
``activation_checkpointing``). OneFlow 0.9.0's ``ProxyModule`` has neither, so ``GraphBase`` and every 0.1.1 model's
``set_pipeline_stage_id`` fail while the graph is built (docs/upstream-bugs.md #9). This gives the proxies both back:
``origin`` is the module (tensor); ``config.stage_id = s`` becomes ``set_stage(s, placement of stage s)`` (0.9.0's own
``stage_id`` setter keeps no placement and prints a deprecation line per module); a module's own ``config`` attribute
takes precedence. Applied only where ``GraphBase`` knows no other API: LiBai main's checks ``hasattr(model,
"origin")`` and its models use the 0.9.0 API when ``config`` is absent.
"""
import functools
import inspect

from oneflow import Tensor, nn
from oneflow.nn.graph import GraphModule, GraphTensor
from oneflow.nn.graph.proxy import ProxyModule, ProxyTensor

from .patching import replace

REASON = "LiBai 0.1.1's GraphBase and models reach OneFlow 0.9.0's ProxyModule by .origin / .config"


@functools.lru_cache(maxsize=None)
def graph_base_needs_origin():
    """Whether the installed ``libai.models.utils.GraphBase`` only knows the pre-0.9 proxy API."""
    from libai.models.utils import GraphBase

    source = inspect.getsource(GraphBase)
    return ".origin" in source and ".to(nn.Module)" not in source and not hasattr(ProxyModule, "origin")


class LegacyGraphConfig:
    """``proxy.config`` as OneFlow 0.8's ``Block.config``, over 0.9.0's ``GraphModule`` / ``GraphTensor``."""

    def __init__(self, block):
        object.__setattr__(self, "_block", block)

    @property
    def stage_id(self):
        return self._block.stage_id

    @stage_id.setter
    def stage_id(self, stage):
        from .layout import stage_placements

        placements = stage_placements()
        if stage not in placements:
            raise ValueError(f"{self._block.name}: pipeline stage {stage} is not one of LiBai's layout "
                             f"({sorted(placements)})")
        self._block.set_stage(stage, placements[stage])

    def __getattr__(self, name):
        return getattr(self._block, name)

    def __setattr__(self, name, value):
        if isinstance(getattr(type(self), name, None), property):
            object.__setattr__(self, name, value)  # stage_id
        else:
            setattr(self._block, name, value)  # activation_checkpointing, ...


def _module_origin(proxy):
    return proxy.to(nn.Module)


def _tensor_origin(proxy):
    return proxy.to(Tensor)


def _module_config(proxy):
    if hasattr(proxy.to(nn.Module), "config"):
        return ProxyModule.__getattr__(proxy, "config")  # the module's own attribute, as before
    return LegacyGraphConfig(proxy.to(GraphModule))


def _tensor_config(proxy):
    return LegacyGraphConfig(proxy.to(GraphTensor))


def apply(needed=None):
    """Give OneFlow's proxies ``origin`` and ``config`` where LiBai needs them; True if it changed anything."""
    if not (graph_base_needs_origin() if needed is None else needed):
        return False
    changed = False
    for owner, name, getter in ((ProxyModule, "origin", _module_origin), (ProxyTensor, "origin", _tensor_origin),
                                (ProxyModule, "config", _module_config), (ProxyTensor, "config", _tensor_config)):
        changed |= replace(owner, name, property(getter), REASON, patch="graph_proxy_v0_1")
    return changed
