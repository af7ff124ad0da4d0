"""The plugin's model-side work, on the model the trainer trains however the project builds it.

``model_work(cfg, build, builder)`` runs ``build()`` inside the recordings (layer indices; under ``"layout_invariant"``
the initial values), then re-draws randomly initialised tensors from ``train.seed`` (``random.param_init``), converts
and names stochastic layers, watches the model, audits and routes its random ops, routes BatchNorm statistics and
watches late parameters. ``ConsistentBatchTrainer.build_model`` runs LiBai's build through it; a subclass's own
``build_model`` (LiBai main's LLM projects override it without calling the parent, loading through a HuggingFace
loader or adding LoRA adapters), or a mixin's ahead of it, is wrapped into it when the subclass is defined
(``wrap_build_model``). A nested build (``super().build_model``) is part of the outer one: the work is done once, on
the outermost build's model. Weights loaded inside the build (``load_state_dict``, ``copy_``) keep their values: a
full overwrite from a tensor that is not random drops the tensor's record. ``check_trained`` refuses, when training
starts, a model that did not come out of this work (replaced or wrapped after ``build_model``), naming where.
"""
import functools
import logging
import threading
import weakref

from libai.config import try_get_key

from ..compat import batch_statistics
from ..config.checks import recording_layer_indices, warn_on_pipeline_layer_mismatch
from ..random import DEFAULT_RANDOMNESS, modes, recording_init, reinitialize, watch_late_parameters
from ..random.audit import audit_stochastic_ops
from ..random.layers import convert_stochastic_layers, name_stochastic_layers, stochastic_ops
from ..random.param_init import DEFAULT_REBUILD_LIMIT_GIB

logger = logging.getLogger(__name__)
_worked = weakref.WeakSet()  # the models model_work returned
_building = threading.local()


def model_work(cfg, build, builder):
    """``build()``'s model with the plugin's model-side work done; ``builder`` names the build in the log."""
    if getattr(_building, "active", False):
        return build()  # inside an outer build (a subclass's calling super()): the outer one does the work
    _building.active = True
    try:
        model = _built_with_work(cfg, build, builder)
    finally:
        _building.active = False
    _worked.add(model)
    return model


def _built_with_work(cfg, build, builder):
    randomness = try_get_key(cfg, "train.randomness", default=DEFAULT_RANDOMNESS)
    with recording_layer_indices(cfg) as layer_indices:  # train.dist.pipeline_num_layers vs the model
        model = build() if randomness != "layout_invariant" else _build_with_seeded_init(cfg, build, builder)
    warn_on_pipeline_layer_mismatch(cfg, model, layer_indices)
    converted = convert_stochastic_layers(model)
    if converted:
        logger.info("stochastic layers under libai_ext's streams: %s", ", ".join(converted))
    name_stochastic_layers(model)
    stochastic_ops.watch_model(model)
    audit_stochastic_ops(model, randomness)
    stochastic_ops.route_stochastic_ops()
    if randomness == "layout_invariant":
        # BatchNorm over the global batch, as on 1 rank
        batch_statistics.route_batch_statistics(modes.layout_invariant)
    # The optimizer gets the parameters right after this: later ones are refused / warned about.
    return watch_late_parameters(model, refuse=randomness == "layout_invariant")


def _build_with_seeded_init(cfg, build, builder):
    """Initial values from ``train.seed`` and each tensor's name alone (``libai_ext.random.param_init``)."""
    seed = try_get_key(cfg, "train.seed", default=0)
    with recording_init() as recorder:
        model = build()
    # (``build`` again only if a draw reached no parameter: a discarded draw, or one that got in untracked)
    limit = float(try_get_key(cfg, "train.init_rebuild_limit_gib", default=DEFAULT_REBUILD_LIMIT_GIB))
    redrawn = reinitialize(model, recorder, seed, rebuild=build, rebuild_limit=int(limit * 2 ** 30))
    followers = sum("(follows " in recipe for recipe in redrawn.values())
    logger.info("layout_invariant init of the model %s built: %d randomly initialised tensors re-drawn from "
                "train.seed=%d, their names and global indices (the model's own distributions and ops; %d of them "
                "copies or derivations that follow their source; other tensors keep their constant init or the "
                "values loaded into them): %s", builder, len(redrawn), seed, followers, ", ".join(redrawn))
    for name, recipe in redrawn.items():
        logger.debug("  %s ~ %s", name, recipe)
    return model


def wrap_build_model(cls, base):
    """Run the ``build_model`` ``cls`` resolves to (classmethod, staticmethod or method) through ``model_work``,
    unless it is ``base``'s own or one wrapped when its class was defined (a subclass of ``base``): a subclass's
    own override, or a mixin's ahead of ``base``."""
    owner = next(klass for klass in cls.__mro__ if "build_model" in klass.__dict__)
    if owner is not cls and issubclass(owner, base):
        return
    own = owner.__dict__["build_model"]
    kind = type(own) if isinstance(own, (classmethod, staticmethod)) else None
    function = own.__func__ if kind else own
    builder = f"{owner.__qualname__}.build_model"

    @functools.wraps(function)
    def build_model(*args, **kwargs):
        cfg = kwargs["cfg"] if "cfg" in kwargs else args[-1]
        return model_work(cfg, functools.partial(function, *args, **kwargs), builder)
    cls.build_model = kind(build_model) if kind else build_model


def check_trained(model, where, trainer_cls):
    """Refuse ``model`` (found at ``where``) unless ``model_work`` returned it."""
    if model is None or model in _worked:
        return
    name = trainer_cls.__qualname__
    raise RuntimeError(
        f"{where} ({type(model).__name__}) is not the model {name}.build_model returned: libai_ext's model-side "
        "work (initial weights from train.seed, dropout under libai_ext's streams, random ops audited and routed, "
        f"late parameters watched) was done on that one, not on the model being trained. Build the model you train "
        f"inside {name}.build_model and return it (loading weights or wrapping it in adapters there is covered), "
        "instead of replacing or wrapping self.model after the build.")
