"""Models for LiBai 0.1.1 that split over data, tensor and pipeline parallelism.  May import ``layers`` and
``compat``."""
from .swin import SwinTransformer

__all__ = ["SwinTransformer"]
