"""Batch mixup/cutmix on the global stage-0 batch ("layout_invariant" mode; docs/randomness.md#global-batch-mixup).

Each sample's partner is the flip of the *global* batch (flowvision's ``Mixup`` flips the local one), and λ /
mixup-or-cutmix / the box are drawn once per global batch (``draw_mix``, option for option as flowvision 0.1.0's
``Mixup._params_per_batch`` / ``cutmix_bbox_and_lam``) from a generator keyed by (``train.seed``, global optimizer
step) alone: the same mixed batch on any layout, and nothing to save for a resume.  ``ConsistentBatchTrainer.run_step``
sets the step (``draws.drawing_step``; ``mixup_step`` for code of one's own).  Every rank runs the same global ops:
ranks outside stage 0 take part in the transfers with their placeholders.
"""
import contextlib
import functools
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np
import oneflow as flow
from flowvision.data import Mixup

from . import draws, modes
from .draws import key

MIXUP_KEY = "dataloader.train.mixup_func"


@dataclass(frozen=True)
class MixupOptions:
    """The options of a flowvision batch ``Mixup``, checked."""
    mixup_alpha: float
    cutmix_alpha: float
    cutmix_minmax: Optional[Tuple[float, float]]
    prob: float
    switch_prob: float
    correct_lam: bool
    label_smoothing: float
    num_classes: int
    enabled: bool = True


@dataclass(frozen=True)
class MixDraw:
    """One step's decision; ``box`` is ``(y_lo, y_hi, x_lo, x_hi)`` for cutmix, else None."""
    lam: float
    use_cutmix: bool = False
    box: Optional[Tuple[int, int, int, int]] = None

    @property
    def mixes(self):
        return self.lam != 1.0


def _probability(value, name):
    if not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{MIXUP_KEY}.{name}={value!r} must be in [0, 1]")
    return float(value)


def _alpha(value, name):
    if float(value) < 0.0:
        raise ValueError(f"{MIXUP_KEY}.{name}={value!r} must be >= 0")
    return float(value)


def _minmax(value):
    if value is None:
        return None
    lo, hi = (float(v) for v in value) if len(value) == 2 else (None, None)
    if lo is None or not 0.0 <= lo < hi <= 1.0:
        raise ValueError(f"{MIXUP_KEY}.cutmix_minmax={value!r} must be two ratios 0 <= min < max <= 1")
    return lo, hi


def mixup_options(mixup):
    """``MixupOptions`` from a flowvision ``Mixup``'s attributes; refuses what a global batch
    mixup cannot reproduce, naming ``dataloader.train.mixup_func``."""
    if mixup.mode != "batch":
        raise ValueError(f"{MIXUP_KEY}.mode={mixup.mode!r}: train.randomness='layout_invariant' mixes the global "
                         "batch and supports mode='batch' only (or set train.randomness='fast': local mixup, "
                         "pairs and λ then depend on the data-parallel split)")
    options = MixupOptions(
        mixup_alpha=_alpha(mixup.mixup_alpha, "mixup_alpha"),
        cutmix_alpha=_alpha(mixup.cutmix_alpha, "cutmix_alpha"),
        cutmix_minmax=_minmax(mixup.cutmix_minmax),
        prob=_probability(mixup.mix_prob, "prob"),
        switch_prob=_probability(mixup.switch_prob, "switch_prob"),
        correct_lam=bool(mixup.correct_lam),
        label_smoothing=_probability(mixup.label_smoothing, "label_smoothing"),
        num_classes=int(mixup.num_classes),
        enabled=bool(getattr(mixup, "mixup_enabled", True)),
    )
    if options.mixup_alpha == 0.0 and options.cutmix_alpha == 0.0:
        raise ValueError(f"{MIXUP_KEY}: mixup_alpha and cutmix_alpha are both 0 (and no cutmix_minmax): "
                         "nothing to mix")
    if options.num_classes < 1:
        raise ValueError(f"{MIXUP_KEY}.num_classes={mixup.num_classes!r} must be a positive int")
    return options


def _lam_box(rng, lam, h, w):
    # A square-ratio box around a uniform centre, clipped to the image (flowvision's rand_bbox, margin 0).
    ratio = np.sqrt(1.0 - lam)
    cut_h, cut_w = int(h * ratio), int(w * ratio)
    cy, cx = int(rng.integers(0, h)), int(rng.integers(0, w))
    return (int(np.clip(cy - cut_h // 2, 0, h)), int(np.clip(cy + cut_h // 2, 0, h)),
            int(np.clip(cx - cut_w // 2, 0, w)), int(np.clip(cx + cut_w // 2, 0, w)))


def _minmax_box(rng, minmax, h, w):
    cut_h = int(rng.integers(int(h * minmax[0]), int(h * minmax[1])))
    cut_w = int(rng.integers(int(w * minmax[0]), int(w * minmax[1])))
    yl, xl = int(rng.integers(0, h - cut_h)), int(rng.integers(0, w - cut_w))
    return yl, yl + cut_h, xl, xl + cut_w


def _cutmix(rng, options, lam, h, w):
    if options.cutmix_minmax is not None:
        box = _minmax_box(rng, options.cutmix_minmax, h, w)
    else:
        box = _lam_box(rng, lam, h, w)
    if options.correct_lam or options.cutmix_minmax is not None:
        yl, yh, xl, xh = box
        lam = 1.0 - (yh - yl) * (xh - xl) / float(h * w)
    return MixDraw(float(lam), True, box)


def draw_mix(options, seed, step, image_hw):
    """The decision for the global batch of training step ``step`` (images ``image_hw`` = (H, W)), drawn from a
    generator that is a function of (seed, step) only (its ``draws.key``)."""
    if step < 0:
        raise ValueError(f"mixup step must be >= 0, got {step}")
    rng = np.random.Generator(np.random.PCG64(key(int(seed), "mixup", int(step), bits=128)))
    if not options.enabled or rng.random() >= options.prob:
        return MixDraw(1.0)
    if options.mixup_alpha > 0.0 and options.cutmix_alpha > 0.0:
        use_cutmix = bool(rng.random() < options.switch_prob)
    else:
        use_cutmix = options.mixup_alpha == 0.0
    alpha = options.cutmix_alpha if use_cutmix else options.mixup_alpha
    lam = float(rng.beta(alpha, alpha))
    if lam == 1.0 or not use_cutmix:
        return MixDraw(lam)
    return _cutmix(rng, options, lam, *image_hw)


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


class GlobalMixup:
    """A flowvision batch ``Mixup``'s options, applied to global tensors with keyed draws."""

    def __init__(self, mixup_func):
        if not isinstance(mixup_func, Mixup) or any(
                getattr(type(mixup_func), name) is not getattr(Mixup, name) for name in _FLOWVISION_METHODS):
            raise TypeError(
                f"{MIXUP_KEY} is a {type(mixup_func).__name__}: train.randomness='layout_invariant' mixes the "
                "global batch and reproduces flowvision.data.Mixup's options only (a subclass overriding its "
                "batch path included); use flowvision.data.Mixup, or train.randomness='fast' for local mixup")
        self.options = mixup_options(mixup_func)

    def __call__(self, images, labels, step=None):
        """Mixed global ``images`` and soft ``labels`` (float, ``[B, num_classes]``) of one step: ``step`` a
        ``draws.Step`` (its seed and step), an int (with the layers' seed), or None (the current step).  Images mix
        as flowvision's batch mix does, with the global batch's flip as every sample's partner."""
        if images.ndim < 3 or images.shape[0] % 2:
            raise ValueError(f"{MIXUP_KEY}: batch mixup needs images [B, ..., H, W] with an even global batch B, "
                             f"got {tuple(images.shape)}")
        if labels.ndim != 1 or labels.shape[0] != images.shape[0]:
            raise ValueError(f"{MIXUP_KEY}: batch mixup needs one class id per image, got labels "
                             f"{tuple(labels.shape)} for images {tuple(images.shape)}")
        step = current_step() if step is None else step
        seed, step = (step.seed, step.step) if isinstance(step, draws.Step) else (modes.layer_seed(), step)
        draw = draw_mix(self.options, seed, step, tuple(images.shape[-2:]))
        if draw.lam != 1.0:
            partners = flow.flip(images, [0])
            if draw.use_cutmix:
                images = flow.where(_box_mask(images, draw.box), partners, images)
            else:
                images = images * draw.lam + partners * (1.0 - draw.lam)
        # Soft labels: smoothed one-hot rows mixed with the flipped batch's, as flowvision's ``mixup_target``.
        options = self.options
        off = options.label_smoothing / options.num_classes
        on = 1.0 - options.label_smoothing + off
        classes = flow.arange(options.num_classes, dtype=labels.dtype, placement=labels.placement,
                              sbp=[flow.sbp.broadcast] * len(labels.sbp)).unsqueeze(0)
        own = flow.where(labels.unsqueeze(1) == classes, on, off)
        flipped = flow.where(flow.flip(labels, [0]).unsqueeze(1) == classes, on, off)
        return images, own * draw.lam + flipped * (1.0 - draw.lam)


def _box_mask(images, box):
    """bool ``[1, .., H, W]``, True inside the cutmix box, replicated on ``images``' placement."""
    h, w = images.shape[-2:]
    yl, yh, xl, xh = box
    mask = np.zeros((1,) * (images.ndim - 2) + (h, w), dtype=bool)
    mask[..., yl:yh, xl:xh] = True
    replicated = [flow.sbp.broadcast] * len(images.sbp)
    return flow.tensor(mask, placement=images.placement, sbp=replicated)


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
