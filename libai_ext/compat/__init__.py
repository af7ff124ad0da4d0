"""Compatibility with the installed LiBai line and device, in one place.

Owns one module per LiBai line (``libai_v0_1``, ``libai_main``: what each line's API looks like), ``detect`` (what
the installed package lacks) and every repair of OneFlow and LiBai, one module each: device traps (``compile_step``,
``cuda_placements``, ``cpu_layer_norm``, ``cpu_bias_gelu``), LiBai repairs (``hf_weights``, ``swin_v0_1``,
``graph_proxy_v0_1``, ``special_tokens``, ``get_batch_api``) and what OneFlow changes with the layout
(``batch_statistics``, ``pipeline_stages``); patch table: docs/architecture.md. ``apply_patches()`` applies each
repair only where needed; a device trap decides per call from the tensor's own device.

Every change to another package, here and elsewhere in libai_ext, goes through ``patching``: the registry that
declares it and can undo it (``applied_patches()``, ``restoring_patches()``). Importing this package loads neither
OneFlow nor LiBai (``patching`` is standard library only). May import OneFlow and LiBai, nothing else of libai_ext
(a repair that depends on a mode is given it when installed).
"""
import importlib
import logging

from .patching import applied, applied_patches, restoring as restoring_patches

logger = logging.getLogger(__name__)


def apply_patches():
    """Apply the registry's repairs for the installed LiBai line and device; explicit and idempotent.

    Returns the names of the attributes replaced so far."""
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

    So a config written for LiBai 0.1.1 runs on main as on 0.1.1 (values: ``libai_main.missing_config_keys``) instead of
    failing in ``DefaultTrainer.__init__``. Keys the config sets are never changed."""
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
