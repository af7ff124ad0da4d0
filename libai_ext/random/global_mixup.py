"""Batch mixup/cutmix on the global stage-0 batch ("layout_invariant" mode).

flowvision's batch ``Mixup`` pairs sample ``i`` with ``B - 1 - i`` of the *local* batch and
draws λ per local batch, so data-parallel splitting changes who is mixed with whom.  Here
the partner is the flip of the *global* batch (``S(0)`` over data parallelism, made global
on stage 0 first) and λ / mixup-or-cutmix / the box come from ``mixup_draws`` keyed by
(``train.seed``, training step): the same mixed batch on 1 rank and on any layout.

The step is the global optimizer step (``ConsistentBatchTrainer.run_step`` sets it with
``libai_ext.random.draws.drawing_step``; ``mixup_step`` is the same for code of one's own), so a
resumed run draws the same λ at the same step, and under gradient accumulation the whole step's
global batch is mixed at once (``step_batches``).  Every rank runs the
same global ops (ranks outside stage 0 too: their placeholders take part in the transfers).
"""
import contextlib
import functools

import numpy as np
import oneflow as flow
from flowvision.data import Mixup

from . import draws, modes
from .mixup_draws import MIXUP_KEY, draw_mix, mixup_options

# flowvision's batch path, whose semantics the global mixup reproduces: a subclass that
# overrides any of these does something else.
_FLOWVISION_METHODS = ("__call__", "_mix_batch", "_params_per_batch")


@contextlib.contextmanager
def mixup_step(step):
    """Key the global mixup (and the stochastic layers) drawn inside this block by training step ``step``."""
    with draws.drawing_step(int(step)):
        yield


def current_step():
    step = draws.current_step()
    if step is None:
        raise RuntimeError(
            "train.randomness='layout_invariant' keys mixup by the training step, and no step is set: "
            "call get_batch from ConsistentBatchTrainer.run_step, or inside "
            "libai_ext.mixup_step(step)")
    return step


def _is_stock_flowvision_mixup(mixup_func):
    return isinstance(mixup_func, Mixup) and all(
        getattr(type(mixup_func), name) is getattr(Mixup, name) for name in _FLOWVISION_METHODS)


class GlobalMixup:
    """A flowvision batch ``Mixup``'s options, applied to global tensors with keyed draws."""

    def __init__(self, mixup_func):
        if not _is_stock_flowvision_mixup(mixup_func):
            raise TypeError(
                f"{MIXUP_KEY} is a {type(mixup_func).__name__}: train.randomness='layout_invariant' mixes the "
                "global batch and reproduces flowvision.data.Mixup's options only (a subclass overriding its "
                "batch path included); use flowvision.data.Mixup, or train.randomness='fast' for local mixup")
        self.options = mixup_options(mixup_func)

    def __call__(self, images, labels, step=None):
        """Mixed global ``images`` and soft ``labels`` (float, ``[B, num_classes]``) of one step: ``step`` a
        ``draws.Step`` (its seed and step), an int (with the layers' seed), or None (the current step)."""
        check_batch(images, labels)
        step = current_step() if step is None else step
        seed, step = (step.seed, step.step) if isinstance(step, draws.Step) else (modes.layer_seed(), step)
        draw = draw_mix(self.options, seed, step, tuple(images.shape[-2:]))
        return mix_images(images, draw), soft_targets(labels, draw.lam, self.options)


def check_batch(images, labels):
    if images.ndim < 3 or images.shape[0] % 2:
        raise ValueError(f"{MIXUP_KEY}: batch mixup needs images [B, ..., H, W] with an even global batch B, "
                         f"got {tuple(images.shape)}")
    if labels.ndim != 1 or labels.shape[0] != images.shape[0]:
        raise ValueError(f"{MIXUP_KEY}: batch mixup needs one class id per image, got labels "
                         f"{tuple(labels.shape)} for images {tuple(images.shape)}")


def mix_images(images, draw):
    """flowvision's batch mix, with the global batch's flip as every sample's partner."""
    if not draw.mixes:
        return images
    partners = flow.flip(images, [0])
    if draw.use_cutmix:
        return flow.where(_box_mask(images, draw.box), partners, images)
    return images * draw.lam + partners * (1.0 - draw.lam)


def _box_mask(images, box):
    """bool ``[1, .., H, W]``, True inside the cutmix box, replicated on ``images``' placement."""
    h, w = images.shape[-2:]
    yl, yh, xl, xh = box
    mask = np.zeros((1,) * (images.ndim - 2) + (h, w), dtype=bool)
    mask[..., yl:yh, xl:xh] = True
    replicated = [flow.sbp.broadcast] * len(images.sbp)
    return flow.tensor(mask, placement=images.placement, sbp=replicated)


def _one_hot(labels, options):
    off = options.label_smoothing / options.num_classes
    on = 1.0 - options.label_smoothing + off
    classes = flow.arange(options.num_classes, dtype=labels.dtype, placement=labels.placement,
                          sbp=[flow.sbp.broadcast] * len(labels.sbp))
    return flow.where(labels.unsqueeze(1) == classes.unsqueeze(0), on, off)


def soft_targets(labels, lam, options):
    """Smoothed one-hot rows mixed with the flipped batch's, as flowvision's ``mixup_target``."""
    return _one_hot(labels, options) * lam + _one_hot(flow.flip(labels, [0]), options) * (1.0 - lam)


def split_mixup(mixup_func, randomness=None):
    """``(local mixup or None, global mixup or None)`` for the randomness mode (default: the layers')."""
    if mixup_func is None:
        return None, None
    if (randomness or modes.randomness()) == "fast":
        return mixup_func, None
    # Built once per options as they are now (a schedule may turn a Mixup's mixup_enabled off mid-run).
    return None, _global_mixup(mixup_func, repr(getattr(mixup_func, "__dict__", None)))


@functools.lru_cache(maxsize=8)
def _global_mixup(mixup_func, options):
    return GlobalMixup(mixup_func)
