"""Models for LiBai 0.1.1 that split over data, tensor and pipeline parallelism."""
from .swin import SwinTransformer

__all__ = ["SwinTransformer"]
