"""Compatibility with the installed LiBai line and device, in one place.

One module per LiBai line (``libai_v0_1``, ``libai_main``: what each line's API looks like)
and one per device trap (``compile_step``, ``cuda_placements``, ``cpu_layer_norm``,
``cpu_bias_gelu``), plus ``swin_v0_1`` for LiBai 0.1.1's Swin, ``graph_proxy_v0_1`` for
LiBai 0.1.1's graph code on OneFlow 0.9.0, and ``special_tokens`` for the special tokens LiBai's
T5 tokenizer set-up declares but never counts.
``detect`` reads from the installed package what it lacks; ``apply_patches()`` applies each
repair only where it is needed, and the device traps decide per call from the tensor's own
device, so the same call is right on CPU and CUDA hosts.
"""
import logging

from omegaconf import OmegaConf

from . import compile_step, cpu_bias_gelu, cpu_layer_norm, cuda_placements, graph_proxy_v0_1, special_tokens, swin_v0_1
from .detect import libai_line
from .patching import applied

logger = logging.getLogger(__name__)


def apply_patches():
    """Apply every repair the installed LiBai needs; explicit and idempotent.

    Returns the names of the LiBai attributes replaced so far.
    """
    compile_step.apply()
    cuda_placements.apply()
    cpu_layer_norm.apply()
    cpu_bias_gelu.apply()
    swin_v0_1.apply()
    graph_proxy_v0_1.apply()
    special_tokens.apply()
    return patches_applied()


def patches_applied():
    """Names of the LiBai attributes replaced by ``apply_patches``."""
    return sorted(applied())


def fill_missing_config_keys(cfg, line=None):
    """Add to ``cfg`` the keys the installed LiBai line reads but ``cfg`` lacks; returns them.

    A config written for LiBai 0.1.1 then runs on LiBai main as it did on 0.1.1 (see
    ``libai_main.missing_config_keys`` for the values) instead of failing in
    ``DefaultTrainer.__init__``.  Keys the config sets are never changed.
    """
    missing = (line or libai_line()).missing_config_keys(cfg)
    for key, value in missing.items():
        OmegaConf.update(cfg, key, value, merge=True, force_add=True)
    if missing:
        logger.warning(f"libai_ext: config keys missing for {(line or libai_line()).NAME}, set to "
                       + ", ".join(f"{k}={v!r}" for k, v in missing.items()))
    return missing


# The names before the patches stopped being CPU-only (tools and user scripts call them).
apply_cpu_patches = apply_patches
cpu_patches_applied = patches_applied

__all__ = ["apply_cpu_patches", "apply_patches", "cpu_patches_applied", "fill_missing_config_keys", "libai_line",
           "patches_applied"]
