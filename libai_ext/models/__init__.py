"""Models that split over data, tensor and pipeline parallelism: the demo's MLP-Mixer over pipeline stages
(``pipeline_mixer``), Swin for LiBai 0.1.1 with its windows kept on their stages (``swin``) and the loss for class
ids and mixup's soft labels (``losses``).  May import ``random`` (the stochastic layers) and ``compat``."""
from .swin import SwinTransformer

__all__ = ["SwinTransformer"]
