"""``ConsistentBatchTrainer``: LiBai's ``DefaultTrainer`` with correctly paired batches."""
import functools
import inspect

from libai.config import try_get_key
from libai.config.lazy import locate
from libai.engine import DefaultTrainer
from libai.utils import distributed as dist

from ..checkpoint.committed import use_committed_checkpoints, with_committed_retention
from ..checkpoint.resume import choose_resume_checkpoint, continue_finished_run, load_checkpoint_or_weights
from ..compat import detect, get_batch_api, graph_proxy_v0_1, patching, vocab_padding
from ..compat.layout import placement_data_parallel_rank
from ..compat.pipeline_stages import explain_mixed_stages
from ..data.position import KEY as DATA_POSITION
from ..lifetime.preemption import evaluate_interruptibly, preemptible
from ..lifetime.startup import start_rank
from ..random import DEFAULT_RANDOMNESS, preserved_rng_state
from ..random.draws import current_step, drawing_step
from .batch import Stage0OnlyLoader, consistent_batch, stage0_only_loading
from .global_loader import layout_invariant, order_train_loaders, use_global_test_order, wants_global_order
from .graph import check_graph_config, feed_step, log_mask_path
from .model_work import check_trained, model_work, wrap_build_model
from .hooks import RawLossWriter
from .step_batches import StepBatchLoader
from .step_schedule import per_optimizer_step, step_scheduler


def samplers_follow_placement():
    """While building data loaders, give samplers the data-parallel rank of the placement (patch
    ``sampler_placement_rank``): both lines' loader builders (``libai.data.build``) call
    ``dist.get_data_parallel_rank()`` through the module when they build the sampler."""
    return patching.temporarily([(dist, "get_data_parallel_rank", placement_data_parallel_rank)],
                                "sampler_placement_rank")


def resume_sampler_position(cfg):
    """Hand the resumed ``cfg.dataloader.consumed_samples`` to the train loader.

    LiBai (0.1.1 and main) computes it on resume but never passes it on, so a resumed
    run reads the data from the first sample again.
    """
    consumed = try_get_key(cfg, "dataloader.consumed_samples")
    train = cfg.dataloader.train
    target = train.get("_target_")
    if consumed is None or target is None:
        return
    if isinstance(target, str):
        target = locate(target)
    if "consumed_samples" in inspect.signature(target).parameters:
        train.consumed_samples = consumed


def check_mixup_func(loader):
    """Refuse a ``mixup_func`` that cannot be called, naming the config key.

    The tempting override ``dataloader.train.mixup_func=None`` sets the *string* "None"
    (Hydra's grammar spells None ``null``); LiBai would only fail at the first step.
    """
    mixup = getattr(loader, "mixup_func", None)
    if mixup is not None and not callable(mixup):
        hint = " (to turn mixup off write dataloader.train.mixup_func=null)" if mixup == "None" else ""
        raise ValueError(f"dataloader.train.mixup_func={mixup!r} is not callable{hint}")


def eager_accumulation(cfg):
    """``train.num_accumulation_steps`` in eager mode (LiBai then runs one micro-batch per iteration), else 1."""
    if try_get_key(cfg, "graph.enabled", default=False):
        return 1
    return int(try_get_key(cfg, "train.num_accumulation_steps", default=1) or 1)


def check_checkpoint_period(cfg, accumulation):
    """A checkpoint inside an optimizer step cannot be resumed exactly (LiBai saves no accumulated
    gradients, and the step's batch is read at its first micro-batch): refuse, naming the keys."""
    period = try_get_key(cfg, "train.checkpointer.period", default=None)
    if period and int(period) % accumulation:
        raise ValueError(f"train.checkpointer.period={period} is not a multiple of train.num_accumulation_steps="
                         f"{accumulation}: in eager mode an iteration is one micro-batch, and a checkpoint inside an "
                         "optimizer step cannot be resumed exactly")


class ConsistentBatchTrainer(DefaultTrainer):
    """A ``DefaultTrainer`` whose batches are built on pipeline stage 0 only.

    Every ``DistTensorData`` field becomes global on stage 0 first and then moves to the stage of its
    ``placement_idx``, so images and (mixed-up, soft) labels come from the same augmentation.  Set
    ``train.trainer = "libai_ext.ConsistentBatchTrainer"`` in a config, or subclass it in a project's script
    (docs/usage.md).  Under ``train.randomness="layout_invariant"`` (the default) it also keeps every draw a
    function of ``train.seed`` and the step: the data order and augmentation (``global_loader``), the global
    mixup, initial weights (``engine.model_work``) and dropout masks (docs/randomness.md, docs/init.md).  Its
    checkpoints commit atomically and hold the data position and every rank's random state, so ``--resume``
    continues exactly (docs/resume.md, docs/checkpoints.md), and a second live run into its output folder is
    refused; SIGTERM stops every rank after the next step
    (docs/preemption.md).  Config keys nobody reads are warned about, libai_ext's misspelt ones refused
    (docs/config-keys.md).
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        wrap_build_model(cls, ConsistentBatchTrainer)  # a project's own build_model gets the model-side work too

    def __init__(self, cfg):
        start_rank(cfg)  # what libai-ext-train's set-up did already; a project's own script has no such set-up
        choose_resume_checkpoint(cfg)
        continue_finished_run(cfg)
        super().__init__(cfg)

    def resume_or_load(self, resume=True):
        use_committed_checkpoints(self)
        position = getattr(self.train_loader, "data_position", None)  # saved with, and restored from, checkpoints
        if position is not None:
            self.checkpointer.checkpointables[DATA_POSITION] = position
        resumed = resume and self.checkpointer.has_checkpoint()
        load_checkpoint_or_weights(self, resume)
        if position is not None:
            position.check_resumed(resumed)

    def train(self):
        check_trained(getattr(self._trainer, "model", None), f"{type(self).__qualname__}._trainer.model", type(self))
        with preemptible(self):  # its hook is the last of every step
            return super().train()

    def run_step(self):
        # get_batch is a classmethod LiBai calls without the iteration: hand it over here, and
        # tell the stochastic layers which draw of which step this is (libai_ext.random.draws).
        # In eager mode LiBai counts micro-steps (train_iter is multiplied by the accumulation); a graph takes a
        # whole step per call and numbers its micro-batches itself.
        accumulation, layout = self._step_layout
        if accumulation is None:
            position = dict(step=self.iter, **layout)
        else:
            position = dict(step=self.iter // accumulation, micro=self.iter % accumulation,
                            micro_batches=accumulation, **layout)
        with drawing_step(**position):
            try:
                if self._legacy_step:
                    self._run_legacy_step()
                else:
                    super().run_step()
            except RuntimeError as error:  # OneFlow's bare placement error, explained where it is a stage mix
                mixed = explain_mixed_stages(error, self.model, dist.get_dist_util().pipeline_parallel_size)
                if mixed is None:
                    raise
                raise mixed from error

    def _run_legacy_step(self):
        """LiBai main's step for a project trainer written for 0.1.1's ``run_step(get_batch)`` (LiBai main's
        own MoCo v3, docs/upstream-bugs.md): ``get_batch`` handed over in that convention, the device bound."""
        self._trainer.iter = self.iter
        self._trainer.run_step(get_batch_api.with_input_device(self.get_batch, self.cfg.train.input_placement_device))

    @functools.cached_property
    def _legacy_step(self):
        """Whether the inner trainer's ``run_step`` is a 0.1.1 project's on LiBai main (``_run_legacy_step``)."""
        return bool(get_batch_api.run_step_arguments()) and not get_batch_api.takes_input_device(self._trainer.run_step)

    @functools.cached_property
    def _step_layout(self):
        """``(accumulation in eager mode or None in a graph, the layout's arguments of a draws.Step)``."""
        data_parallel = dist.get_dist_util().data_parallel_size
        micro_batch = try_get_key(self.cfg, "train.train_micro_batch_size", default=None)
        batch = dict(data_parallel=data_parallel, data_parallel_rank=placement_data_parallel_rank(),
                     batch_rows=None if micro_batch is None else int(micro_batch) * data_parallel)
        if try_get_key(self.cfg, "graph.enabled", default=False):
            return None, batch  # GraphBase numbers the micro-batches
        return int(try_get_key(self.cfg, "train.num_accumulation_steps", default=1) or 1), batch

    @classmethod
    def build_tokenizer(cls, cfg):
        """LiBai's tokenizer; under ``"layout_invariant"`` the vocabulary is padded for
        ``tokenization.max_tensor_parallel_size``, not this run's tp (``compat.vocab_padding``)."""
        tokenizer = super().build_tokenizer(cfg)
        if try_get_key(cfg, "train.randomness", default=DEFAULT_RANDOMNESS) == "layout_invariant":
            vocab_padding.pad_vocabulary(cfg, tokenizer)
        return tokenizer

    @classmethod
    def build_model(cls, cfg):
        """LiBai's build, inside libai_ext's model-side work (``engine.model_work``)."""
        log_mask_path()
        return model_work(cfg, functools.partial(super().build_model, cfg), "LiBai's build_model")

    @classmethod
    def build_graph(cls, cfg, model, optimizer=None, lr_scheduler=None, is_train=True):
        """The graph ``graph.train_graph`` / ``graph.eval_graph`` names, built by LiBai, taking the step.

        Whatever class the config names (LiBai's ``GraphBase``, a subclass of it, an ``nn.Graph`` of
        the user's, ``libai_ext.engine.GraphBase``), the graph keeps its own methods and gets the
        training step as an input at every train call (``engine.graph.feed_step``), so its dropout
        masks are the ones eager training draws.  LiBai 0.1.1's graph code gets OneFlow 0.9.0's
        proxies the way it reads them (``compat.graph_proxy_v0_1``).
        """
        if is_train:
            check_graph_config(cfg)  # what OneFlow cannot do on CPU ranks, for any graph class
            check_trained(model, f"the model handed to {cls.__qualname__}.build_graph", cls)
        graph_proxy_v0_1.apply()
        return feed_step(super().build_graph(cfg, model, optimizer, lr_scheduler, is_train))

    @classmethod
    def test(cls, cfg, test_loaders, model, evaluator=None):
        def evaluate(loaders):
            with preserved_rng_state():
                return super(ConsistentBatchTrainer, cls).test(cfg, loaders, model, evaluator)

        return evaluate_interruptibly(evaluate, test_loaders, model)

    # get_batch takes the installed LiBai's arguments: ``(data, mixup_func=None)`` on 0.1.1, ``(data,
    # input_placement_device, mixup_func=None)`` on main, whose device is honoured as main's stock does (mixup and
    # placements on that device; None: the layout's).  Every field is made global on stage 0 first, then on its own
    # stage (``engine.batch.consistent_batch``), keyed by the step ``run_step`` set.
    if detect.get_batch_takes_device():
        @classmethod
        def get_batch(cls, data, input_placement_device=None, mixup_func=None):
            """Every field global on stage 0 first, then on its own stage (LiBai main's arguments)."""
            return consistent_batch(data, mixup_func, input_placement_device, current_step())
    else:
        @classmethod
        def get_batch(cls, data, mixup_func=None):
            """Every field global on stage 0 first, then on its own stage (LiBai 0.1.1's arguments)."""
            return consistent_batch(data, mixup_func, None, current_step())

    @classmethod
    def build_train_loader(cls, cfg, tokenizer=None):
        resume_sampler_position(cfg)
        global_order = wants_global_order(cfg)
        with samplers_follow_placement():
            train, valid, test = super().build_train_loader(cfg, tokenizer)
        check_mixup_func(train)
        train, valid, test = order_train_loaders(cfg, train, valid, test, global_order)
        position = getattr(train, "data_position", None)
        if stage0_only_loading(cfg):
            train = Stage0OnlyLoader(train)
        accumulation = eager_accumulation(cfg)
        if global_order and accumulation > 1:
            check_checkpoint_period(cfg, accumulation)
            train = StepBatchLoader(train, accumulation)  # one global batch per step, mixed as one
        train.data_position = position  # the checkpointable, on whatever wraps the loader
        return train, valid, test

    @classmethod
    def build_lr_scheduler(cls, cfg, optimizer):
        accumulation = eager_accumulation(cfg)
        if accumulation > 1:  # over optimizer steps, as in graph mode (engine/step_schedule.py)
            return step_scheduler(cfg, optimizer, accumulation)
        return super().build_lr_scheduler(cfg, optimizer)

    def build_hooks(self):
        # losses.jsonl: every iteration's raw losses, for whatever script builds this trainer (a project's own too)
        hooks = with_committed_retention(super().build_hooks(), self.cfg) + [RawLossWriter(self.cfg.train.output_dir)]
        accumulation = eager_accumulation(self.cfg)
        return per_optimizer_step(hooks, accumulation) if accumulation > 1 else hooks

    @classmethod
    def build_test_loader(cls, cfg, tokenizer=None):
        with samplers_follow_placement():
            loaders = super().build_test_loader(cfg, tokenizer)
        return [use_global_test_order(loader) for loader in loaders] if layout_invariant(cfg) else loaders
