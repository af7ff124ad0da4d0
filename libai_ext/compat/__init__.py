"""Compatibility with the installed LiBai line and device, in one place.

One module per LiBai line (``libai_v0_1``, ``libai_main``: what each line's API looks like)
and one per device trap (``compile_step``, ``cuda_placements``, ``cpu_layer_norm`` for LayerNorm and
RMSLayerNorm, ``cpu_bias_gelu``), ``hf_weights`` for LiBai main's HuggingFace loaders without PyTorch, plus
``swin_v0_1`` for LiBai 0.1.1's Swin, ``graph_proxy_v0_1`` for
LiBai 0.1.1's graph code on OneFlow 0.9.0, and ``special_tokens`` for the special tokens LiBai's
T5 tokenizer set-up declares but never counts.  Two repair what OneFlow changes with the layout without a
random draw or with a bare error: ``batch_statistics`` (BatchNorm over the global batch, installed by the
trainer under ``"layout_invariant"``) and ``pipeline_stages`` (a forward that mixes two pipeline stages, named);
``get_batch_api`` also runs a project trainer written for 0.1.1's ``run_step(get_batch)`` on LiBai main.
``detect`` reads from the installed package what it lacks; ``apply_patches()`` applies each
repair only where it is needed, and the device traps decide per call from the tensor's own
device, so the same call is right on CPU and CUDA hosts.

Every change to another package, here and elsewhere in libai_ext, goes through ``patching``: the
registry that declares it and can undo it (``applied_patches()``, ``restoring_patches()``).  Importing
this package loads neither OneFlow nor LiBai (``patching`` is standard library only).  May import
OneFlow and LiBai, nothing else of libai_ext (a repair that depends on a mode is given it when installed).
"""
import importlib
import logging

from .patching import applied, applied_patches, restoring as restoring_patches

logger = logging.getLogger(__name__)


def apply_patches():
    """Apply the registry's repairs for the installed LiBai line and device; explicit and idempotent.

    Returns the names of the attributes replaced so far.
    """
    from . import (
        compile_step, cpu_bias_gelu, cpu_layer_norm, cuda_placements, graph_proxy_v0_1, hf_weights, special_tokens,
        swin_v0_1,
    )

    compile_step.apply()
    cuda_placements.apply()
    cpu_layer_norm.apply()
    cpu_bias_gelu.apply()
    swin_v0_1.apply()
    graph_proxy_v0_1.apply()
    special_tokens.apply()
    hf_weights.apply()
    return patches_applied()


def patches_applied():
    """Names of the attributes libai_ext replaced (``applied_patches()`` says why and how to turn each off)."""
    return sorted(applied())


def fill_missing_config_keys(cfg, line=None):
    """Add to ``cfg`` the keys the installed LiBai line reads but ``cfg`` lacks; returns them.

    A config written for LiBai 0.1.1 then runs on LiBai main as it did on 0.1.1 (see
    ``libai_main.missing_config_keys`` for the values) instead of failing in
    ``DefaultTrainer.__init__``.  Keys the config sets are never changed.
    """
    from omegaconf import OmegaConf

    missing = (line or libai_line()).missing_config_keys(cfg)
    for key, value in missing.items():
        OmegaConf.update(cfg, key, value, merge=True, force_add=True)
    if missing:
        logger.warning(f"libai_ext: config keys missing for {(line or libai_line()).NAME}, set to "
                       + ", ".join(f"{k}={v!r}" for k, v in missing.items()))
    return missing


def libai_line():
    """The module describing the installed LiBai line (``libai_v0_1`` or ``libai_main``)."""
    return importlib.import_module(".detect", __name__).libai_line()


__all__ = ["applied_patches", "apply_patches", "fill_missing_config_keys", "libai_line", "patches_applied",
           "restoring_patches"]
