"""Batch mixup/cutmix decisions (λ, mixup or cutmix, the cutmix box) keyed by (seed, step).

flowvision's batch ``Mixup`` draws them from numpy's global stream once per *local* batch,
so under data parallelism every rank draws its own λ and the draws shift with the split.
Here one draw serves the whole global batch: a generator seeded by (``train.seed``, the
training step) alone, the same on every rank and layout, and reproducible on resume from
the step number (nothing to save).  The decision logic follows flowvision 0.1.0's
``Mixup._params_per_batch`` / ``cutmix_bbox_and_lam`` option for option; only the source
of the random numbers differs.
"""
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from .keys import key

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


def step_generator(seed, step):
    """The generator of training step ``step``: a function of (seed, step) only (its ``keys.key``)."""
    if step < 0:
        raise ValueError(f"mixup step must be >= 0, got {step}")
    return np.random.Generator(np.random.PCG64(key(int(seed), "mixup", int(step), bits=128)))


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
    """The decision for the global batch of training step ``step`` (images ``image_hw`` = (H, W))."""
    rng = step_generator(seed, step)
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
