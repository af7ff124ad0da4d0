"""LiBai's NLP pretraining API on both lines: one config file, the installed line's calls.

Differences between 0.1.1 and main, each read from the installed code's signatures: ``GPTModel``'s layer count is
``num_layers`` or ``hidden_layers`` (main, whose ``from_config`` also reads ``apply_residual_post_layernorm``); main's
``GPT2Dataset`` / ``BertDataset`` also take ``name``, ``max_num_samples`` (filled in by its loader builder) and ``seed``
(its document shuffle); ``T5Dataset``'s masking rate is ``mask_lm_prob`` or ``masked_lm_prob`` (main); main's
``build_nlp_train_val_test_loader`` splits by documents and needs ``train_val_test_num_samples`` (its trainer fills it
in), 0.1.1's splits the samples; main's fused attention softmax (``scale_mask_softmax_fusion``) drops out inside the
op (``fused_scale_mask_softmax_dropout``: routed to libai_ext's streams, runs on CPU), 0.1.1's
``fused_scale_mask_softmax`` has no dropout and no CPU kernel.
"""
import inspect

from libai.config import LazyCall
from omegaconf import DictConfig

# Arguments that only one line's classes take: given by a config, dropped where not taken.
LINE_ONLY_FIELDS = frozenset({"name", "seed", "max_num_samples", "masking_style", "max_preds_per_seq",
                              "apply_residual_post_layernorm"})
LAYER_COUNT_NAMES = ("hidden_layers", "num_layers")
# One argument under two names: a config gives either, the installed class gets its own.
FIELD_ALIASES = ({"mask_lm_prob", "masked_lm_prob"},)  # T5Dataset: 0.1.1's name, main's name


def parameters(callable_):
    """``{name: default or inspect.Parameter.empty}`` of a class's or function's parameters."""
    target = callable_.__init__ if inspect.isclass(callable_) else callable_
    return {name: p.default for name, p in inspect.signature(target).parameters.items()
            if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def _renamed(fields, known):
    """``fields`` with each name of ``FIELD_ALIASES`` that ``known`` lacks given the alias it has."""
    renamed = dict(fields)
    for names in FIELD_ALIASES:
        for name in sorted(names & set(renamed) - set(known)):
            alias = next(iter(names & set(known)), None)
            if alias is not None:
                renamed[alias] = renamed.pop(name)
    return renamed


def _taken(callable_, fields):
    """``fields`` that ``callable_`` takes (an aliased name renamed to the one it takes); a field
    it does not take is an error unless it is one of ``LINE_ONLY_FIELDS``."""
    known = parameters(callable_)
    fields = _renamed(fields, known)
    unknown = sorted(set(fields) - set(known) - LINE_ONLY_FIELDS)
    if unknown:
        raise TypeError(f"{callable_.__module__}.{callable_.__qualname__} takes no {unknown} on this LiBai line")
    return {k: v for k, v in fields.items() if k in known}


def model_config(model_class, layers, wrapper_fields=None, **fields):
    """The ``cfg`` of a LiBai ``@configurable`` model (``GPTModel``, ``BertModel``; for ``GPTForPreTraining(cfg=...)``):
    ``layers`` under the installed class's layer-count name, ``fields``, and the class's defaults for every other
    argument its ``from_config`` reads (a config written for one line lacks the other line's keys). ``wrapper_fields``
    are kept as given: keys the pretraining wrapper reads itself (``BertForPreTraining``'s ``add_binary_head``)."""
    known = parameters(model_class)
    layer_key = next((name for name in LAYER_COUNT_NAMES if name in known), None)
    if layer_key is None:
        raise TypeError(f"{model_class.__qualname__} takes none of {LAYER_COUNT_NAMES}")
    taken = _taken(model_class, fields)
    missing = sorted(k for k, v in known.items() if v is inspect.Parameter.empty and k not in taken and k != layer_key)
    if missing:
        raise TypeError(f"{model_class.__qualname__} needs {missing} (no default)")
    defaults = {k: v for k, v in known.items() if v is not inspect.Parameter.empty}
    return DictConfig({**defaults, **taken, **(wrapper_fields or {}), layer_key: layers})


def layer_count(model_cfg):
    """The layer count of a ``model_config`` result, whatever the line calls it."""
    return next(model_cfg[name] for name in LAYER_COUNT_NAMES if name in model_cfg)


def dataset(dataset_class, **fields):
    """``LazyCall(dataset_class)`` with the fields the installed class takes (``name``, ``seed``...
    only where it takes them).  The trainer sets ``tokenizer``; main's loader builder sets
    ``indexed_dataset`` (instantiated from this config) and ``max_num_samples``."""
    return LazyCall(dataset_class)(**_taken(dataset_class, fields))


def train_val_test_loader(datasets, splits, weights=None, num_workers=0):
    """``LazyCall(build_nlp_train_val_test_loader)`` for ``datasets`` split ``splits`` (one
    ``[train, valid, test]`` ratio per dataset).  On main it carries the key
    ``train_val_test_num_samples`` that main's trainer fills in (and requires)."""
    from libai.data import build_nlp_train_val_test_loader

    fields = dict(dataset=list(datasets), splits=[list(s) for s in splits],
                  weights=list(weights) if weights is not None else [1.0] * len(datasets), num_workers=num_workers)
    if "train_val_test_num_samples" in parameters(build_nlp_train_val_test_loader):
        fields["train_val_test_num_samples"] = None  # main's trainer computes it from train_iter
    return LazyCall(build_nlp_train_val_test_loader)(**fields)


def softmax_fusion_drops_out():
    """Whether ``MultiheadAttention``'s fused softmax (``scale_mask_softmax_fusion=True``) applies
    the attention dropout inside the fused op (main) rather than calling a dropout-free fused
    softmax that has no CPU kernel (0.1.1)."""
    from libai.layers.attention import MultiheadAttention

    return "fused_scale_mask_softmax_dropout" in inspect.getsource(MultiheadAttention.forward)
