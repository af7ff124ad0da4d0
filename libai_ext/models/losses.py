"""Classification loss for hard class ids and for mixup's soft label rows."""
import oneflow as flow
from oneflow import nn


class SoftTargetCrossEntropy(nn.Module):
    """Cross entropy against either class ids ``[B]`` or probability rows ``[B, C]``."""

    def forward(self, logits, target):
        log_probs = flow.nn.functional.log_softmax(logits, dim=-1)
        if target.ndim == logits.ndim - 1:
            return -flow.gather(log_probs, 1, target.unsqueeze(1).to(flow.int64)).mean()
        return -(target.to(logits.dtype) * log_probs).sum(-1).mean()
