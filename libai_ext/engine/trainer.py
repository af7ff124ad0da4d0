"""``ConsistentBatchTrainer``: LiBai's ``DefaultTrainer`` with correctly paired batches."""
import contextlib
import inspect
import logging

from libai.config import try_get_key
from libai.config.lazy import locate
from libai.engine import DefaultTrainer
from libai.utils import distributed as dist

from ..compat import fill_missing_config_keys, get_batch_api
from ..compat.layout import placement_data_parallel_rank
from ..layers import name_stochastic_layers
from ..random import DEFAULT_RANDOMNESS, preserved_rng_state, recording_init, reinitialize
from .batch import consistent_batch
from .checkpoint import use_committed_checkpoints, with_committed_retention
from .global_loader import use_global_order, wants_global_order
from .global_mixup import mixup_step
from .launcher_lifetime import die_with_launcher
from .resume import choose_resume_checkpoint, continue_finished_run, load_checkpoint_or_weights
from .stage0_loading import Stage0Batch, Stage0OnlyLoader


@contextlib.contextmanager
def samplers_follow_placement():
    """While building data loaders, give samplers the data-parallel rank of the placement.

    Both lines' loader builders (``libai.data.build``) call ``dist.get_data_parallel_rank()``
    through the module when they build the sampler, so replacing it there reaches them.
    """
    original = dist.get_data_parallel_rank
    dist.get_data_parallel_rank = placement_data_parallel_rank
    try:
        yield
    finally:
        dist.get_data_parallel_rank = original


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


class ConsistentBatchTrainer(DefaultTrainer):
    """A ``DefaultTrainer`` whose batches are built on pipeline stage 0 only.

    Every ``DistTensorData`` field becomes global on stage 0 first and then moves to
    the stage of its ``placement_idx``, so images and (mixed-up, soft) labels always
    come from the same augmentation.  Data loaders give each sampler the shard that
    its rank holds in the stage-0 placement.  Use it by setting
    ``train.trainer = "libai_ext.ConsistentBatchTrainer"`` (see ``tools/train_net.py``).

    Stage-0-only loading (``train.stage0_only_loading``, on by default): under pipeline
    parallelism, ranks outside stage 0 neither read nor augment training samples.

    Data order (``train.randomness="layout_invariant"``, the default, and no sampler of the
    config's own): the global batch of each step is the same samples, augmented the same way,
    on any data-parallel layout (``global_loader``); ``"fast"`` keeps LiBai's sampler.

    Checkpoints commit atomically (``libai_ext.engine.checkpoint``): a save killed at any point
    leaves the last committed checkpoint resumable, and ``--resume`` takes the newest intact one.

    Randomness: checkpoints also hold every rank's python/numpy/OneFlow state, so
    ``--resume`` continues the exact random streams; evaluation runs inside a saved and
    restored random state, so it never shifts training's streams; stochastic layers of
    ``libai_ext.layers`` are keyed by their qualified names.

    Initial weights: under ``train.randomness="layout_invariant"`` (the default) every randomly
    initialised parameter is re-drawn from ``train.seed``, its qualified name and each element's
    global index, with the distribution the model's code asked for: the same initial model on
    1 rank and on any (dp, tp, pp) layout.  ``train.load_weight`` is loaded whenever training does not resume
    (LiBai 0.1.1 ignores it without ``--resume``).  ``--resume`` with a larger
    ``train.train_iter`` continues a finished run (``last_checkpoint`` = ``model_final``).

    Mixup (``train.randomness="layout_invariant"``): applied to the global stage-0 batch, λ
    and the cutmix box keyed by (``train.seed``, iteration), so neither the data-parallel
    split nor a resume changes who is mixed with whom, or how much.
    """

    def __init__(self, cfg):
        die_with_launcher()
        fill_missing_config_keys(cfg)  # a config written for LiBai 0.1.1 also runs on main
        choose_resume_checkpoint(cfg)
        continue_finished_run(cfg)
        super().__init__(cfg)

    def resume_or_load(self, resume=True):
        use_committed_checkpoints(self)
        load_checkpoint_or_weights(self, resume)

    def build_hooks(self):
        return with_committed_retention(super().build_hooks(), self.cfg)

    def run_step(self):
        # get_batch is a classmethod LiBai calls without the iteration: hand it over here.
        with mixup_step(self.iter):
            super().run_step()

    @classmethod
    def build_model(cls, cfg):
        if try_get_key(cfg, "train.randomness", default=DEFAULT_RANDOMNESS) != "layout_invariant":
            model = super().build_model(cfg)
        else:
            model = cls._build_with_seeded_init(cfg)
        name_stochastic_layers(model)
        return model

    @classmethod
    def _build_with_seeded_init(cls, cfg):
        """Initial values from ``train.seed`` and each tensor's name alone (``libai_ext.random.param_init``)."""
        seed = try_get_key(cfg, "train.seed", default=0)
        with recording_init() as recorder:
            model = super().build_model(cfg)
        redrawn = reinitialize(model, recorder, seed)
        logger = logging.getLogger(__name__)
        kinds = sorted({recipe.split("(")[0] for recipe in redrawn.values()})
        logger.info("layout_invariant init: %d randomly initialised tensors re-drawn from train.seed=%d, their "
                    "names and global indices (%s draws, then the model's own ops; other tensors keep their "
                    "constant init): %s", len(redrawn), seed, "/".join(kinds), ", ".join(redrawn))
        for name, recipe in redrawn.items():
            logger.debug("  %s ~ %s", name, recipe)
        return model

    @classmethod
    def test(cls, cfg, test_loaders, model, evaluator=None):
        with preserved_rng_state():
            return super().test(cfg, test_loaders, model, evaluator)

    @classmethod
    def get_batch(cls, data, *args, **kwargs):
        """Every field global on stage 0 first, then on its own stage.

        Takes the installed LiBai's arguments: ``(data, mixup_func=None)`` on 0.1.1,
        ``(data, input_placement_device="cuda", mixup_func=None)`` on main, where the
        device is honoured as main's stock does (mixup and placements on that device).
        """
        device_type, mixup_func = get_batch_api.split_arguments(args, kwargs)
        if isinstance(data, Stage0Batch):
            return data.to_global(mixup_func, device_type)
        return consistent_batch(data, mixup_func, device_type)

    @classmethod
    def build_train_loader(cls, cfg, tokenizer=None):
        resume_sampler_position(cfg)
        global_order = wants_global_order(cfg)
        with samplers_follow_placement():
            train, valid, test = super().build_train_loader(cfg, tokenizer)
        check_mixup_func(train)
        if global_order:
            train = use_global_order(train, try_get_key(cfg, "dataloader.train.consumed_samples", default=0))
        if try_get_key(cfg, "train.stage0_only_loading", default=True) and \
                dist.get_dist_util().pipeline_parallel_size > 1:
            train = Stage0OnlyLoader(train)
        return train, valid, test

    @classmethod
    def build_test_loader(cls, cfg, tokenizer=None):
        with samplers_follow_placement():
            return super().build_test_loader(cfg, tokenizer)
