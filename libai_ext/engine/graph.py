"""Graph mode: every train graph takes the step (``StepFedGraph``), and ``GraphBase`` for OneFlow 0.9.0.

``StepFedGraph`` (a mixin) and ``feed_step(graph)`` give any ``nn.Graph`` the training step as an input at every train
call, so stochastic layers draw the masks of eager training (``libai_ext.random.layers.graph_calls``);
``ConsistentBatchTrainer`` feeds it to whatever graph the config names. ``GraphBase`` is one of them. LiBai 0.1.1's
``GraphBase`` reaches graph settings through ``module.origin`` / ``module.config``, which OneFlow 0.9.0's
``ProxyModule`` lacks (the module is ``proxy.to(nn.Module)``, its stage and activation checkpointing
``proxy.to(GraphModule)``). This one takes LiBai's constructor arguments and those LiBai main's ``build_graph`` adds,
so one config selects it on both lines (``graph.train_graph = LazyCall(GraphBase)(is_train=True)``, ``eval_graph``
with ``is_train=False``), and sets pipeline stages with no per-model code (``assign_pipeline_stages``).
"""
import contextlib
import functools
import logging

import oneflow as flow
from oneflow import nn
from oneflow.nn.graph import GraphModule

from libai.utils import distributed as dist

from ..compat import cpu_graph_shared_params, layout, patching
from ..random import keyed_op
from ..random.draws import current_step
from ..random.modes import layer_seed
from ..random.layers import graph_calls

logger = logging.getLogger(__name__)

STAGE_HOOK = "set_graph_stages"
_CALLS = "_libai_ext_step_calls"  # a graph's own call count: its step outside a trainer


class GraphConfigError(ValueError):
    """A graph option that cannot work here; the message names the config key."""


def check_graph_options(fp16=False, zero_optim=False, grad_acc_steps=1, data_parallel_size=1,
                        tensor_parallel_size=1, cuda=None):
    """Refuse what OneFlow 0.9.0 train graphs cannot do on CPU ranks; each message names its config key.

    ``cuda``: whether the graph's placements are CUDA ones (``GraphBase`` passes its model's; before LiBai's layout
    exists, LiBai 0.1.1's own choice, ``flow.cuda.is_available()``). CPU findings, measured on 2-8 CPU ranks:

    * AMP: the graph AMP pass converts CUDA ops only; on CPU it inserts no cast, so fp16 would be silently ignored.
    * ZeRO, and dp > 1 with tp > 1: the first step aborts every rank in the CPU transport (``register.cpp:75 Check
      failed: separated_header_mem_ptr() == nullptr`` from ``EpollCommNet::SendActorMsg``). Which jobs hit it depends
      on the boxing the compiler picks (the demo mixer at its real size does, toy sizes may not): refused as a whole.
    * Tensor parallelism: a column-parallel bias whose gradient arrives broadcast or partial (its output sliced along
      the split axis, as ChatGLM's ``query_key_value``), and LoRA's ``lora_B`` beside it, abort the same way
      (docs/upstream-bugs.md §38); the compiled job shows both, and ``refuse_split_gradients`` refuses them.
    """
    cuda = flow.cuda.is_available() if cuda is None else cuda
    if isinstance(grad_acc_steps, bool) or not isinstance(grad_acc_steps, int) or grad_acc_steps < 1:
        raise GraphConfigError(f"train.num_accumulation_steps must be an int >= 1, got {grad_acc_steps!r}")
    if cuda:
        return
    if fp16:
        raise GraphConfigError(
            "train.amp.enabled=True does nothing on CPU ranks: OneFlow 0.9.0's graph AMP only converts "
            "CUDA ops (the job would silently train in float32). Set train.amp.enabled=False.")
    if zero_optim:
        raise GraphConfigError(
            "train.zero_optimization.enabled=True with graph.enabled=True aborts OneFlow 0.9.0 on CPU "
            "ranks (register.cpp:75 separated_header_mem_ptr() == nullptr in the CPU transport). "
            "Set train.zero_optimization.enabled=False, or train in eager mode (graph.enabled=False).")
    if data_parallel_size > 1 and tensor_parallel_size > 1:
        raise GraphConfigError(
            f"graph.enabled=True with train.dist.data_parallel_size={data_parallel_size} and "
            f"train.dist.tensor_parallel_size={tensor_parallel_size} aborts OneFlow 0.9.0 on CPU ranks "
            "(register.cpp:75 separated_header_mem_ptr() == nullptr in the CPU transport). "
            "Use eager mode (graph.enabled=False) for data x tensor parallel layouts on CPU, or a "
            "layout with only one of them (dp x pp or tp x pp work in graph mode).")


def check_graph_config(cfg, layout_set_up=True):
    """``check_graph_options`` on a config's keys, for a train graph of any class, in LiBai's layout (before it is
    set up, ``layout_set_up=False``: sized from the config and the world size as LiBai will size it)."""
    from libai.config import try_get_key

    if layout_set_up:
        util = dist.get_dist_util()
        dp, tp, cuda = util.data_parallel_size, util.tensor_parallel_size, placement_is_cuda()
    else:
        world = flow.env.get_world_size()
        tp = min(try_get_key(cfg, "train.dist.tensor_parallel_size", default=1), world)
        pp = min(try_get_key(cfg, "train.dist.pipeline_parallel_size", default=1), world // tp)
        dp, cuda = world // (tp * pp), None
    grad_acc_steps = try_get_key(cfg, "train.num_accumulation_steps", default=1) or 1
    check_graph_options(fp16=bool(try_get_key(cfg, "train.amp.enabled", default=False)),
                        zero_optim=bool(try_get_key(cfg, "train.zero_optimization.enabled", default=False)),
                        grad_acc_steps=grad_acc_steps, data_parallel_size=dp, tensor_parallel_size=tp, cuda=cuda)
    if layout_set_up:  # once per train graph, where the device is known
        warn_of_cpu_gradient_accumulation(grad_acc_steps, cuda)


def _sbp_names(nd_sbp):
    """``nd_sbp`` (a proto) as OneFlow's short names, one per hierarchy axis: "S(1)", "B", "P"."""
    names = []
    for sbp in nd_sbp.sbp_parallel:
        kind = sbp.WhichOneof("parallel_type")
        names.append(f"S({sbp.split_parallel.axis})" if kind == "split_parallel" else
                     {"broadcast_parallel": "B", "partial_sum_parallel": "P"}.get(kind, str(kind)))
    return names


# Ops a parameter's gradient passes through between the op that makes it and the optimizer's update
GRADIENT_PASSES = ("hierarchical_parallel_cast", "cast", "identity", "scalar_mul")


def split_gradients(job):
    """``[(op, sbp made, sbp taken)]`` of a compiled job (``graph._compiled_job_proto``) where OneFlow 0.9.0's CPU
    transport aborts (docs/upstream-bugs.md §38): a bias gradient (a ``reduce_sum_like`` output) taken split along a
    hierarchy axis where it was made broadcast or partial, and any parameter's gradient made partial there and taken
    split on its way to the optimizer's update (LoRA's ``lora_B`` beside ChatGLM's sliced ``query_key_value``).  A
    weight's gradient made broadcast and taken split trains (measured), and is not listed."""
    signatures = job.job_parallel_view_conf.op_name2nd_sbp_signature_conf

    def sbp_names(op, bn):
        sbp = signatures[op.name].bn_in_op2nd_sbp.get(bn)
        return None if sbp is None else _sbp_names(sbp)
    user_ops = [op for op in job.net.op if op.WhichOneof("op_type") == "user_conf" and op.name in signatures]
    producers = {lbn: (op, f"{key}_{i}") for op in user_ops for key, names in op.user_conf.output.items()
                 for i, lbn in enumerate(names.s)}
    gradients = set()  # lbns on a parameter gradient's way from the op that makes it to the update
    for op in user_ops:
        if op.user_conf.op_type_name.endswith("_update") and "model_diff" in op.user_conf.input:
            lbn = op.user_conf.input["model_diff"].s[0]
            while lbn in producers and lbn not in gradients:
                gradients.add(lbn)
                producer = producers[lbn][0]
                if producer.user_conf.op_type_name not in GRADIENT_PASSES:
                    break
                lbn = next(iter(producer.user_conf.input.values())).s[0]
    found = []
    for op in user_ops:
        for key, names in op.user_conf.input.items():
            for i, lbn in enumerate(names.s):
                if lbn not in producers:
                    continue
                producer, bn = producers[lbn]
                came, taken = sbp_names(producer, bn), sbp_names(op, f"{key}_{i}")
                if came is None or taken is None:
                    continue
                kind = producer.user_conf.op_type_name
                aborting = ("B", "P") if kind == "reduce_sum_like" else ("P",) if lbn in gradients else ()
                if any(c in aborting and t.startswith("S") for c, t in zip(came, taken)):
                    found.append((producer.name, ",".join(came), ",".join(taken)))
    return found


def refuse_split_gradients(graph):
    """Refuse a compiled CPU train graph under tensor parallelism before its first step if it holds a gradient
    ``split_gradients`` lists: OneFlow 0.9.0's CPU transport aborts every rank at that step (``register.cpp:75``,
    docs/upstream-bugs.md §38).  Under data parallelism alone the same change (a partial sum over the data-parallel
    ranks, split) trains: MAE's and SimCSE's graphs on dp2."""
    tp = dist.get_dist_util().tensor_parallel_size
    if tp == 1:
        return
    found = split_gradients(graph._compiled_job_proto)
    if found:
        modules = sorted({producer.split("-", 1)[0] for producer, _, _ in found})
        raise GraphConfigError(
            f"graph.enabled=True on CPU ranks with train.dist.tensor_parallel_size={tp}: the gradients of "
            f"{', '.join(modules[:4])}{f' and {len(modules) - 4} more' if len(modules) > 4 else ''} are made "
            f"{found[0][1]} and taken {found[0][2]} (beside a column-parallel output sliced along its split axis), "
            "which aborts every rank of OneFlow 0.9.0 at the first step (register.cpp:75 in the CPU transport; "
            "libai_ext's docs/upstream-bugs.md section 38). Train this model in eager mode (graph.enabled=False) on "
            "tensor-parallel layouts, or in graph mode without tensor parallelism.")


def warn_of_cpu_gradient_accumulation(grad_acc_steps, cuda):
    """OneFlow 0.9.0's CPU train graphs with gradient accumulation now and then compute a wrong gradient
    (docs/upstream-bugs.md §32).  Warned, not refused: most steps are right, a wrong one is a few percent off in
    some tensors, and CUDA graphs were not checked."""
    if not cuda and grad_acc_steps > 1:
        logger.warning(
            f"graph.enabled=True with train.num_accumulation_steps={grad_acc_steps} on CPU ranks: OneFlow 0.9.0's "
            "train graphs with gradient accumulation now and then compute a wrong gradient there, so this run may "
            "leave the trajectory of eager training and of 1 rank, and two runs of it may differ "
            "(docs/upstream-bugs.md §32). For a run that must reproduce, set train.num_accumulation_steps=1 (with "
            "a larger train.train_micro_batch_size) or graph.enabled=False.")


def placement_is_cuda(placement=None):
    """Whether the graph runs on CUDA: the type of stage 0's placement (default: LiBai's layout)."""
    placement = dist.get_layer_placement(0) if placement is None else placement
    return placement.type == "cuda"


def layer_stages():
    """``{ranks tuple: (stage_id, placement)}`` for every pipeline stage of LiBai's layout."""
    return {tuple(placement.ranks.flatten().tolist()): (stage_id, placement)
            for stage_id, placement in layout.stage_placements().items()}


def layer_idx_of(module):
    """The module's ``layer_idx`` if it is an int (LiBai's convention), else None."""
    layer_idx = getattr(module, "layer_idx", None)
    return layer_idx if isinstance(layer_idx, int) and not isinstance(layer_idx, bool) else None


def stage_of(module, stages):
    """``(stage_id, placement)`` of an original module, or None when it does not say.

    An int ``layer_idx`` (LiBai's convention: ``TransformerLayer``, ``LayerNorm``, this project's blocks) gives that
    layer's stage; otherwise the module's own (non-recursive) parameters and buffers decide if they all live on one
    stage's ranks, which covers LiBai's ``Linear`` (it keeps no ``layer_idx``).
    """
    layer_idx = layer_idx_of(module)
    if layer_idx is not None:
        return layout.layer_stage_ids()[layer_idx], dist.get_layer_placement(layer_idx)
    tensors = list(module.parameters(recurse=False)) + list(module.buffers(recurse=False))
    if not tensors or not all(t.is_global for t in tensors):
        return None
    keys = {tuple(t.placement.ranks.flatten().tolist()) for t in tensors}
    return stages.get(keys.pop()) if len(keys) == 1 else None


def assign_pipeline_stages(proxy, stages=None, inherited=None):
    """Walk the graph's modules and ``set_stage`` where a module changes stage; returns how many were set.

    OneFlow's scopes inherit the parent's stage, so a stage is set only where it differs from the nearest ancestor's
    (fewer inserted ``to_global`` / identity ops). ``set_stage`` with a placement also moves the module's inputs there,
    which the models do themselves already: it costs nothing then.
    """
    stages = layer_stages() if stages is None else stages
    count = 0
    found = stage_of(proxy.to(nn.Module), stages)
    if found is not None and found[0] != inherited:
        proxy.to(GraphModule).set_stage(found[0], found[1])
        inherited = found[0]
        count += 1
    for child in proxy._modules.values():
        count += assign_pipeline_stages(child, stages, inherited)
    return count


def outermost_layer_modules(proxy):
    """The modules with a ``layer_idx`` that are not inside another one (blocks, not their norms)."""
    if layer_idx_of(proxy.to(nn.Module)) is not None:
        return [proxy]
    found = []
    for child in proxy._modules.values():
        found += outermost_layer_modules(child)
    return found


def _get(conf, key, default):
    return conf.get(key, default) if hasattr(conf, "get") else getattr(conf, key, default)


def _enabled(conf):
    return conf is not None and bool(_get(conf, "enabled", False))


def global_view_options(global_mode, device=None):
    """``global_mode``'s placement and sbp for a train graph, or None when it is off (``graph.global_mode``)."""
    if not _enabled(global_mode):
        return None
    device = device or dist.get_layer_placement(0).type
    return {"placement": flow.env.all_device_placement(device), "sbp": flow.sbp.split(0)}


def micro_batches(graph):
    """The graph's gradient accumulation steps (``graph.config.set_gradient_accumulation_steps``)."""
    return max(1, int(graph.config.proto.num_gradient_accumulation_steps))


def _taking_step(build):
    """``build`` that takes the step input out of its keyword arguments and traces with it."""
    @functools.wraps(build)
    def build_taking_step(self, *args, **kwargs):
        step = kwargs.pop(graph_calls.STEP_INPUT, None)
        if step is None:  # an eval graph, or a subclass's build calling this one
            tracing = contextlib.nullcontext()
        else:
            tracing = graph_calls.tracing(step, micro_batches(self), dist.get_dist_util().data_parallel_size)
        with tracing, cpu_graph_shared_params.parameters_copied_across_stages(self):
            return build(self, *args, **kwargs)

    build_taking_step.takes_step = True
    return build_taking_step


class StepFedGraph:
    """Mixin of an ``nn.Graph`` whose train steps draw the masks of eager training.

    A train graph (one with an optimizer) takes the step as one more input at every call: the trainer's global step, or
    its own call count outside a trainer. While it traces, the step reaches the stochastic layers
    (``graph_calls.tracing``), and on CPU ranks a parameter read on another stage crosses as a copy
    (``compat.cpu_graph_shared_params``). Every derived class's ``build`` is wrapped to take the step input out first,
    so a subclass's own ``build`` runs as written. Comes first in the bases (``class MyGraph(StepFedGraph, nn.Graph)``),
    or ``feed_step(graph)`` for a built graph."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        build = cls.__dict__.get("build")
        if build is not None and not getattr(build, "takes_step", False):
            cls.build = _taking_step(build)

    def __call__(self, *args, **kwargs):
        if not self.training:  # an eval graph: the model's eval mode draws nothing
            return super().__call__(*args, **kwargs)
        calls = self.__dict__.get(_CALLS, 0)
        step = current_step()
        seed, step = (layer_seed(), calls) if step is None else (step.seed, step.step)
        device = dist.get_layer_placement(0).type
        kwargs[graph_calls.STEP_INPUT] = graph_calls.step_input(seed, step, micro_batches(self), device)
        if not self._is_compiled and device == "cpu":  # compiled and checked here; nn.Graph runs it
            self._compile(*args, **kwargs)
            refuse_split_gradients(self)
        outputs = super().__call__(*args, **kwargs)
        self.__dict__[_CALLS] = calls + 1
        return outputs


_fed_classes = {}


def step_fed_class(graph_class):
    """``graph_class`` (an ``nn.Graph`` subclass) with ``StepFedGraph`` first in its bases: its own
    methods and overrides all kept.  One class per ``graph_class``."""
    if issubclass(graph_class, StepFedGraph):
        return graph_class
    if not issubclass(graph_class, flow.nn.Graph):
        raise TypeError(f"{graph_class.__module__}.{graph_class.__qualname__} is not an oneflow.nn.Graph subclass")
    if graph_class not in _fed_classes:
        _fed_classes[graph_class] = type(graph_class.__name__, (StepFedGraph, graph_class), {
            "build": graph_class.build, "__module__": graph_class.__module__,
            "__qualname__": graph_class.__qualname__, "__doc__": graph_class.__doc__})
    return _fed_classes[graph_class]


def feed_step(graph):
    """Make ``graph`` (any ``nn.Graph``, not yet called) take the step at every train call; returns it.

    Its class becomes ``step_fed_class(type(graph))`` (patch ``step_fed_graph``): nothing else about it changes.
    """
    log_mask_path()
    if isinstance(graph, StepFedGraph):
        return graph
    if graph._is_compiled:
        raise RuntimeError(f"{type(graph).__name__} was traced already: feed_step(graph) must come before its "
                           "first call")
    patching.replace(graph, "__class__", step_fed_class(type(graph)), patching.DECLARED["step_fed_graph"].why,
                     patch="step_fed_graph")
    return graph


@functools.lru_cache(maxsize=None)
def log_mask_path():
    """Say once which path dropout masks take in graphs and on GPUs (the keyed-dropout op, or int32 ops and why):
    when a graph is fed the step, and when ``ConsistentBatchTrainer`` builds its model."""
    logger.info(f"libai_ext: {keyed_op.status()[1]}")


class GraphBase(StepFedGraph, nn.Graph):
    """A train or eval graph around a LiBai model, for OneFlow 0.9.0.

    The arguments of LiBai 0.1.1's ``libai.models.utils.GraphBase``, plus those LiBai main's ``build_graph`` adds
    (``None`` when the config has no such key):

    * ``grad_acc_steps`` (``train.num_accumulation_steps``): each call takes ``micro_batch * grad_acc_steps`` rows and
      returns per-micro-batch losses;
    * ``activation_checkpoint`` (``train.activation_checkpoint.enabled``): recompute the outermost modules with a
      ``layer_idx`` (the blocks); ``fp16`` (``train.amp.enabled``): graph AMP with a dynamic loss scaler, CUDA only;
      ``zero_optim`` / ``zero_stage`` (``train.zero_optimization``): OneFlow's ZeRO;
    * ``global_mode`` (``graph.global_mode``, main): with ``enabled``, the train graph traces in OneFlow's global view
      (tensors created inside ``forward`` are split over all ranks of ``device``, default the layout's device kind);
    * ``auto_parallel_conf`` (``graph.auto_parallel``, main): with ``enabled``, OneFlow's auto-parallel search with the
      config's ``enable_auto_parallel_ignore_user_sbp_config``, ``trunk_algo`` and ``sbp_collector``.

    Pipeline stages: every module with an int ``layer_idx``, or whose own parameters sit on one stage's ranks, gets
    ``set_stage(stage_id, placement)``; a model's optional ``set_graph_stages(self, graph_model)`` then refines that on
    the graph's ``ProxyModule`` (``graph_model.<child>.to(GraphModule).set_stage(...)``). LiBai 0.1.1 models' own
    ``set_pipeline_stage_id`` is not called: it is written against the pre-0.9 ``.origin`` API.
    """

    def __init__(self, model, optimizer=None, lr_scheduler=None, fp16=False, activation_checkpoint=False,
                 grad_acc_steps=1, zero_optim=False, zero_stage=0, is_train=True, global_mode=None,
                 auto_parallel_conf=None, device=None):
        super().__init__()
        cuda = placement_is_cuda()
        if is_train:
            util = dist.get_dist_util()
            check_graph_options(fp16, zero_optim, grad_acc_steps,
                                util.data_parallel_size, util.tensor_parallel_size, cuda=cuda)
        self.model = model
        self.is_train = is_train
        self.global_view = global_view_options(global_mode, device) if is_train else None
        if is_train:
            if optimizer is None:
                raise GraphConfigError("a train graph needs an optimizer (config key: optim)")
            self.add_optimizer(optimizer, lr_sch=lr_scheduler)
            if fp16:
                self.config.enable_amp(True)
                self.set_grad_scaler(flow.amp.GradScaler(
                    init_scale=2 ** 30, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000))
            if grad_acc_steps > 1:
                self.config.set_gradient_accumulation_steps(grad_acc_steps)
            if activation_checkpoint:
                self.set_activation_checkpoint()
            if zero_optim:
                # 0.9.0 renamed LiBai's set_zero_redundancy_optimizer_mode to enable_zero.
                self.config.enable_zero(True, stage=max(1, int(zero_stage)))
        self.set_pipeline_stage_id()
        if _enabled(auto_parallel_conf):
            self.enable_auto_parallel(auto_parallel_conf)
        self.config.allow_fuse_add_to_output(True)
        self.config.allow_fuse_model_update_ops(True)
        self.config.allow_fuse_cast_scale(True)
        if cuda:
            # As LiBai: communication on the compute stream saves memory under model parallelism.
            flow.boxing.nccl.enable_use_compute_stream(True)

    def build(self, **kwargs):
        if self.global_view is None:
            return self._forward(**kwargs)
        from oneflow.utils.global_view import global_mode

        with global_mode(True, **self.global_view):
            return self._forward(**kwargs)

    def _forward(self, **kwargs):
        outputs = self.model(**kwargs)
        if self.is_train:
            sum(outputs.values()).backward()
        return outputs

    def enable_auto_parallel(self, conf):
        self.config.enable_auto_parallel(True)
        self.config.enable_auto_parallel_ignore_user_sbp_config(
            bool(_get(conf, "enable_auto_parallel_ignore_user_sbp_config", False)))
        self.config.enable_auto_parallel_trunk_algo(bool(_get(conf, "trunk_algo", True)))
        self.config.enable_auto_parallel_sbp_collector(bool(_get(conf, "sbp_collector", False)))

    def set_activation_checkpoint(self):
        blocks = outermost_layer_modules(self.model)
        if not blocks:
            raise GraphConfigError(
                "train.activation_checkpoint.enabled=True, but the model has no module with a "
                "layer_idx to recompute")
        for block in blocks:
            block.to(GraphModule).activation_checkpointing = True

    def set_pipeline_stage_id(self):
        count = 0
        if dist.get_dist_util().is_pipeline_model_parallel():
            count = assign_pipeline_stages(self.model)
        hook = getattr(self.model.to(nn.Module), STAGE_HOOK, None)
        if callable(hook):
            hook(self.model)
        logger.debug(f"{type(self).__name__}: pipeline stage set on {count} modules")
