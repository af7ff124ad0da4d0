"""A parameter read on another pipeline stage inside an ``nn.Graph`` on CPU ranks (OneFlow 0.9.0).

LiBai's GPT-2, BERT, T5 and RoBERTa tie the last stage's ``LMLogits`` to stage 0's word embeddings through
``to_global(placement=<last stage>)``. In a CPU graph OneFlow 0.9.0 aborts every rank at the first step
(``register.cpp:75 ... separated_header_mem_ptr() == nullptr``): the CPU transport cannot send a variable's own
register. An ``identity`` copy on the parameter's own stage crosses fine, with the same values and gradients
(``tools/repro/graph_shared_param_cpu.py``). ``parameters_copied_across_stages(graph)`` moves such a copy instead
while ``graph`` traces, for CPU placements only: CUDA graphs are left as they are.
"""
import contextlib

import oneflow as flow
from oneflow.nn.graph.proxy import ProxyTensor

from . import patching


def _proxy_tensors(proxy):
    for tensor in list(proxy._parameters.values()) + list(proxy._buffers.values()):
        if isinstance(tensor, ProxyTensor):
            yield tensor
    for child in proxy._modules.values():
        yield from _proxy_tensors(child)


def graph_variable(graph, tensor):
    """Whether ``tensor`` is the traced value of one of ``graph``'s parameters or buffers."""
    return any(proxy.build_finished and proxy.lazy_origin is tensor
               for block in graph._blocks.values() for proxy in _proxy_tensors(block))


def _target_placement(args, kwargs):
    return kwargs.get("placement", args[0] if args else None)


@contextlib.contextmanager
def parameters_copied_across_stages(graph):
    """Within (while ``graph`` traces): CPU variables reach other placements through a copy."""
    original = flow.Tensor.to_global

    def to_global(tensor, *args, **kwargs):
        placement = _target_placement(args, kwargs)
        if (placement is not None and tensor.is_lazy and tensor.is_global and tensor.placement.type == "cpu"
                and placement != tensor.placement and graph_variable(graph, tensor)):
            tensor = flow._C.identity(tensor)
        return original(tensor, *args, **kwargs)

    with patching.temporarily([(flow.Tensor, "to_global", to_global)], "graph_shared_params"):
        yield
