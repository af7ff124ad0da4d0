"""Classification loss for hard class ids and for mixup's soft label rows."""
import oneflow as flow
from oneflow import nn


class SoftTargetCrossEntropy(nn.Module):
    """Cross entropy for class ids ``[B]`` or probability rows ``[B, num_classes]`` (mixup)."""

    def forward(self, logits, target):
        # Labels live at placement_idx -1; a head on another stage still gets them.
        if target.is_global and target.placement != logits.placement:
            target = target.to_global(placement=logits.placement)
        if not target.is_floating_point():
            return flow.nn.functional.cross_entropy(logits, target)
        log_probs = flow.nn.functional.log_softmax(logits, dim=-1)
        return (-target * log_probs).sum(dim=-1).mean()
