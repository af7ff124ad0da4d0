"""A parameter read on another pipeline stage inside an ``nn.Graph`` on CPU ranks (OneFlow 0.9.0).

LiBai's GPT-2, BERT, T5 and RoBERTa tie the output projection to the word embeddings:
``LMLogits`` on the last stage reads the embedding table of stage 0 with
``word_embeddings.to_global(placement=<last stage>)``.  Inside a graph on CPU ranks OneFlow 0.9.0
then aborts every rank at the first step (``register.cpp:75 Check failed:
separated_header_mem_ptr() == nullptr`` from ``EpollCommNet::SendActorMsg``): the variable's own
register cannot be sent by the CPU transport.  A copy made on the parameter's own stage
(``identity``) is an ordinary register and crosses fine, with the same values and gradients
(``tools/repro/graph_shared_param_cpu.py``).

``parameters_copied_across_stages(graph)``: while ``graph`` traces, a ``to_global`` that moves one
of its parameters or buffers to another placement of CPU type moves an identity copy of it
instead.  Decided per call from the tensor's own placement: CUDA graphs are left as they are.
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
