"""BatchNorm over the global batch, as on 1 rank: OneFlow 0.9.0 normalises each shard with its own statistics.

OneFlow 0.9.0's training-mode batch norms all end in ``flow._C.normalization`` (``nn.BatchNorm*d`` and subclasses,
``functional.batch_norm``, ``nn.SyncBatchNorm`` where it does not synchronise) or ``flow._C.normalization_add_relu``
(``nn.FusedBatchNorm*d``), whose kernels take each shard's statistics on a tensor split along a reduced axis, like
DDP without SyncBN (docs/upstream-bugs.md #25). ``route_batch_statistics()`` replaces both: for a training input split
along a reduced axis over more than one rank, the mean and then the variance (OneFlow's kernel also centres first) are
global reductions, one small all-reduce per channel each, used for the output and the running statistics (unbiased
variance, as OneFlow's kernel). Inside ``nn.Graph``, where in-place buffer updates are lost (#13), the batch is
gathered instead and OneFlow's kernel normalises it whole. Everything else (evaluation, an unsplit or channel-split
batch, local tensors, any call under ``train.randomness="fast"``) runs OneFlow's kernel unchanged.

``PER_SAMPLE`` (norms reducing over each sample's own axes) and ``LOCAL_ONLY`` (``SyncBatchNorm``'s ops, local CUDA
tensors only) name OneFlow's other normalising ops; a test fails on a new normalising op in neither list.
"""
import oneflow as flow

from .patching import replace

# OneFlow 0.9.0's functional ops that normalise, by what they reduce over.
BATCH_STATISTICS = ("normalization", "normalization_add_relu")  # routed here
PER_SAMPLE = ("layer_norm", "layer_norm_affine", "group_norm", "rms_norm", "rms_layer_norm", "normalize")
LOCAL_ONLY = ("batch_norm_stats", "batch_norm_gather_stats_with_counts", "batch_norm_elemt",
              "batch_norm_backward_reduce", "batch_norm_backward_elemt")
NOT_NORMALISATION = ("norm", "matrix_norm", "vector_norm", "embedding_renorm_", "normal",
                     "dispatch_crop_mirror_normalize_from_tensorbuffer", "dispatch_crop_mirror_normalize_from_uint8",
                     "dispatch_image_normalize")

_kernels = {}  # OneFlow's own ops, for every call this module does not take over
_active = [lambda: False]  # read at each call: whether the whole-batch statistics are wanted now


def splits_reduced_axis(x, channel_axis):
    """Whether the global tensor ``x`` is split, over more than one rank, along an axis that batch statistics
    reduce over (any axis but ``channel_axis``)."""
    if not x.is_global:
        return False
    ranks_per_axis = x.placement.ranks.shape
    channel_axis %= x.ndim
    reduced_splits = [flow.sbp.split(d) for d in range(x.ndim) if d != channel_axis]
    return any(s in reduced_splits and ranks_per_axis[i] > 1 for i, s in enumerate(x.sbp))


def _takes_over(x, axis, is_training):
    return is_training and _active[0]() and splits_reduced_axis(x, axis)


def normalization(x, running_mean, running_var, weight, bias, axis=1, epsilon=1e-5, momentum=0.1,
                  is_training=False):
    """``flow._C.normalization`` with the statistics of the whole global batch where OneFlow's would take a
    shard's (see the module's doc)."""
    kernel = _kernels["normalization"]
    if not _takes_over(x, axis, is_training):
        return kernel(x, running_mean, running_var, weight, bias, axis=axis, epsilon=epsilon, momentum=momentum,
                      is_training=is_training)
    if _in_graph():
        return kernel(_whole(x, axis), running_mean, running_var, weight, bias, axis=axis, epsilon=epsilon,
                      momentum=momentum, is_training=True).to_global(sbp=x.sbp)
    return _normalize_over_global_batch(x, running_mean, running_var, weight, bias, axis, epsilon, momentum)


def normalization_add_relu(x, addend, running_mean, running_var, weight, bias, axis=1, epsilon=1e-5,
                           momentum=0.1, is_training=False):
    """``flow._C.normalization_add_relu`` (BatchNorm, plus ``addend``, then ReLU) likewise."""
    kernel = _kernels["normalization_add_relu"]
    if not _takes_over(x, axis, is_training):
        return kernel(x, addend, running_mean, running_var, weight, bias, axis=axis, epsilon=epsilon,
                      momentum=momentum, is_training=is_training)
    if _in_graph():
        return kernel(_whole(x, axis), None if addend is None else _whole(addend, axis), running_mean, running_var,
                      weight, bias, axis=axis, epsilon=epsilon, momentum=momentum, is_training=True
                      ).to_global(sbp=x.sbp)
    y = _normalize_over_global_batch(x, running_mean, running_var, weight, bias, axis, epsilon, momentum)
    return flow.relu(y if addend is None else y + addend)


def _in_graph():
    return flow._oneflow_internal.lazy_mode.is_enabled()


def _whole(x, axis):
    """``x`` with every split along a reduced axis gathered: OneFlow's kernel then sees the whole batch.  In a graph,
    where an in-place update of a buffer is lost (docs/upstream-bugs.md #13), the kernel's own update of the
    running statistics is the one that holds; it costs gathering the activation instead of one value per channel."""
    axis %= x.ndim
    return x.to_global(sbp=[flow.sbp.broadcast if s != flow.sbp.split(axis) and s in
                            [flow.sbp.split(d) for d in range(x.ndim)] else s for s in x.sbp])


def _normalize_over_global_batch(x, running_mean, running_var, weight, bias, axis, epsilon, momentum):
    axis %= x.ndim
    reduced = [d for d in range(x.ndim) if d != axis]
    per_channel = [1] * x.ndim
    per_channel[axis] = x.shape[axis]
    mean = x.mean(dim=reduced, keepdim=True)
    centered = x - mean
    variance = (centered * centered).mean(dim=reduced, keepdim=True)
    y = centered * flow.rsqrt(variance + epsilon)
    if weight is not None:
        y = y * weight.reshape(per_channel)
    if bias is not None:
        y = y + bias.reshape(per_channel)
    if running_mean is not None and running_var is not None:
        count = x.numel() // x.shape[axis]
        with flow.no_grad():
            # as OneFlow's kernel: ``momentum`` is the weight of the new batch's statistics, the variance unbiased
            running_mean.mul_(1 - momentum).add_(mean.reshape(-1).to_global(sbp=running_mean.sbp) * momentum)
            unbiased = variance.reshape(-1).to_global(sbp=running_var.sbp) * (count / max(count - 1, 1))
            running_var.mul_(1 - momentum).add_(unbiased * momentum)
    return y


def route_batch_statistics(is_active):
    """Take over OneFlow's batch-normalisation ops (idempotent); ``is_active()``, read at each call, says whether
    the whole batch's statistics are wanted (the trainer passes ``train.randomness == "layout_invariant"``)."""
    _active[0] = is_active
    for name, replacement in (("normalization", normalization), ("normalization_add_relu", normalization_add_relu)):
        _kernels.setdefault(name, getattr(flow._C, name))
        replace(flow._C, name, replacement, "BatchNorm over the global batch under layout_invariant "
                "(OneFlow 0.9.0 normalises each data-parallel shard with its own statistics)", patch="batch_statistics")
