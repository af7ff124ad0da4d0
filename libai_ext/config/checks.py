"""Config values that LiBai accepts silently although they change what trains.

``train.dist.pipeline_num_layers`` is the length of LiBai's layer table, which sets each ``layer_idx``'s stage
(``layer_idx=-1``, a model's final norm and head, on the last). A model with fewer layers than the table leaves the
later stages without layers (``model.depth=2`` under a table of 4 on 2 stages: stage 1 holds only the norm and the
head) and trains without a word; one with more fails inside LiBai with a bare ``IndexError`` (docs/usage.md).
``recording_layer_indices`` records every ``layer_idx`` a model asks a placement for while it is built (every LiBai
layer places its parameters through ``DistributedUtil.get_layer_ranks``) and refuses one past the table, naming the
keys; ``warn_on_pipeline_layer_mismatch`` then compares the layer count (largest ``layer_idx`` + 1) with the table.
"""
import contextlib
import logging

import numpy as np
from libai.config import try_get_key
from libai.utils import distributed as dist
from omegaconf import OmegaConf

logger = logging.getLogger(__name__)
TABLE_KEY = "train.dist.pipeline_num_layers"
STAGES_KEY = "train.dist.pipeline_parallel_size"
# How model configs name their layer count (LiBai's GPT/BERT/T5: num_layers or hidden_layers,
# ViT/MAE: depth, Swin: depths); searched in cfg.model and one level below (LiBai main's cfg=...).
LAYER_COUNT_NAMES = ("depth", "depths", "num_layers", "hidden_layers", "num_hidden_layers", "n_layer",
                     "num_encoder_layers", "num_decoder_layers")
_warned = set()


def model_layer_keys(cfg):
    """``{"model.depth": 2, ...}``: the model config's keys that look like a layer count."""
    model = try_get_key(cfg, "model")
    if model is None or not OmegaConf.is_config(model):
        return {}
    found = {}
    for prefix, node in [("model", model)] + [(f"model.{k}", v) for k, v in model.items() if OmegaConf.is_dict(v)]:
        for name in LAYER_COUNT_NAMES:
            value = node.get(name) if OmegaConf.is_dict(node) else None
            if value is not None:
                found[f"{prefix}.{name}"] = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
    return found


def _keys_text(keys):
    return ", ".join(f"{k}={v}" for k, v in keys.items())


@contextlib.contextmanager
def recording_layer_indices(cfg):
    """Within: the set of non-negative ``layer_idx`` the model being built places layers at.

    A ``layer_idx`` past LiBai's layer table raises a ``ValueError`` naming the config keys.
    """
    util = dist.get_dist_util()
    original = util.get_layer_ranks
    used = set()

    def get_layer_ranks(layer_idx):
        try:
            ranks = original(layer_idx)
        except IndexError:
            table = try_get_key(cfg, TABLE_KEY)
            raise ValueError(
                f"the model places a layer at layer_idx={layer_idx}, past {TABLE_KEY}={table} (LiBai's layer "
                f"table covers layer_idx 0-{table - 1}); set {TABLE_KEY} to the model's layer count"
                + (f" ({_keys_text(model_layer_keys(cfg))})" if model_layer_keys(cfg) else "")) from None
        if int(layer_idx) >= 0:
            used.add(int(layer_idx))
        return ranks

    had_own = "get_layer_ranks" in vars(util)
    util.get_layer_ranks = get_layer_ranks
    try:
        yield used
    finally:
        if had_own:
            util.get_layer_ranks = original
        else:
            del util.get_layer_ranks


def _ranges(indices):
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"``."""
    spans, indices = [], sorted(indices)
    for i in indices:
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


def layer_mismatch_message(table, num_stages, stage_ids, tail_modules, model_keys):
    """The warning for a model of ``len(stage_ids)`` layers under a layer table of ``table``, or None.

    ``stage_ids[i]``: the stage LiBai's table puts layer ``i`` on; ``tail_modules``: what the
    last stage holds besides numbered layers (the modules at ``layer_idx=-1``).
    """
    count = len(stage_ids)
    if num_stages <= 1 or count == 0 or count == table:
        return None
    layers_of = {stage: [i for i, s in enumerate(stage_ids) if s == stage] for stage in range(num_stages)}
    parts = []
    for stage, layers in layers_of.items():
        if layers:
            parts.append(f"stage {stage} holds layers {_ranges(layers)}")
        elif stage == num_stages - 1 and tail_modules:
            parts.append(f"stage {stage} holds no layer, only {', '.join(tail_modules)} (layer_idx -1)")
        else:
            parts.append(f"stage {stage} holds no layer")
    counts = [len(layers) for layers in layers_of.values()]
    named = f"{_keys_text(model_keys)}; " if model_keys else ""
    return (f"{TABLE_KEY}={table} but the model has {count} layers ({named}layer_idx 0-{count - 1}). LiBai "
            f"splits {table} layers over {STAGES_KEY}={num_stages} stages, so the stages get {counts} of the "
            "model's layers: " + "; ".join(parts) + f". Training goes on with this split; set {TABLE_KEY}={count} "
            "to spread the model's layers over every stage.")


def modules_on(model, ranks):
    """Names of the modules whose parameters live on exactly ``ranks``, in the model's order."""
    wanted, names = set(int(r) for r in np.asarray(ranks).flatten()), []
    for name, param in model.named_parameters():
        if param.is_global and set(int(r) for r in np.asarray(param.placement.ranks).flatten()) == wanted:
            owner = name.rpartition(".")[0] or name
            if owner not in names:
                names.append(owner)
    return names


def warn_on_pipeline_layer_mismatch(cfg, model, used):
    """Warn (rank 0, once) when ``train.dist.pipeline_num_layers`` differs from the model's layer count.

    ``used``: the layer indices ``recording_layer_indices`` saw while ``model`` was built.
    Returns the warning, or None.
    """
    util = dist.get_dist_util()
    table = try_get_key(cfg, TABLE_KEY)
    if not used or table is None or util.pipeline_parallel_size <= 1:
        return None
    stage_ids = [util.get_layer_stage_id(i) for i in range(max(used) + 1)]
    tail = modules_on(model, util.get_layer_ranks(-1))
    message = layer_mismatch_message(table, util.pipeline_parallel_size, stage_ids, tail, model_layer_keys(cfg))
    if message and dist.is_main_process() and message not in _warned:
        _warned.add(message)
        logger.warning(message)
    return message
