"""Explicit compatibility patches for LiBai 0.1.1 on OneFlow 0.9.0."""
from .cpu import apply_cpu_patches, cpu_patches_applied

__all__ = ["apply_cpu_patches", "cpu_patches_applied"]
