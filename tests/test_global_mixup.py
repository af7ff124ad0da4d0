"""Global batch mixup (train.randomness="layout_invariant") on one rank: draws, semantics, errors.

The mixed batch is compared with flowvision's own ``Mixup`` made to take the same decisions
(its draw functions patched), and with an independent numpy reference.  Batches are synthetic.
"""
import contextlib

import numpy as np
import oneflow as flow
import pytest
from flowvision.data import Mixup
from flowvision.data import mixup as flowvision_mixup
from libai.data.structures import DistTensorData, Instance
from libai.utils import distributed as dist
from omegaconf import DictConfig

import libai_ext
from libai_ext import ConsistentBatchTrainer, GlobalMixup, mixup_step
from libai_ext.random import modes
from libai_ext.random.global_mixup import MixDraw, draw_mix, mixup_options

BATCH, CLASSES, HW = 32, 10, (8, 6)


@pytest.fixture(autouse=True)
def one_rank():
    libai_ext.apply_patches()
    dist.setup_dist_util(DictConfig({"data_parallel_size": 1, "tensor_parallel_size": 1,
                                     "pipeline_parallel_size": 1, "pipeline_num_layers": 2}))


@contextlib.contextmanager
def randomness(mode, seed=0):
    saved = modes.layer_seed(), modes.randomness()
    modes.set_layer_seed(seed, mode)
    try:
        yield
    finally:
        modes.set_layer_seed(*saved)


def synthetic_batch(seed=0):
    rng = np.random.RandomState(seed)
    images = rng.randn(BATCH, 3, *HW).astype(np.float32)
    return images, rng.randint(0, CLASSES, size=BATCH)


def instance(images, labels):
    return Instance(images=DistTensorData(flow.tensor(images), placement_idx=0),
                    labels=DistTensorData(flow.tensor(labels), placement_idx=-1))


def recipe(**options):
    options = {"mixup_alpha": 0.8, "cutmix_alpha": 1.0, "label_smoothing": 0.1, "num_classes": CLASSES, **options}
    return Mixup(**options)


def draws(mixup, steps, seed=0):
    options = mixup_options(mixup)
    return [draw_mix(options, seed, step, HW) for step in range(steps)]


def test_draws_are_a_function_of_seed_and_step():
    assert draws(recipe(), 20) == draws(recipe(), 20)
    assert draws(recipe(), 20) != draws(recipe(), 20, seed=1)
    assert len({d.lam for d in draws(recipe(cutmix_alpha=0.0), 20)}) == 20  # every step its own λ


def test_draws_follow_the_options():
    n = 4000
    # a step mixes where it draws a blend or a box (a box clipped to nothing on these small images leaves λ = 1)
    mixed = [d for d in draws(recipe(prob=0.6, switch_prob=0.3), n) if d.mixes or d.use_cutmix]
    assert abs(len(mixed) / n - 0.6) < 0.03
    cut = [d for d in mixed if d.use_cutmix]
    assert abs(len(cut) / len(mixed) - 0.3) < 0.03
    for d in cut:  # correct_lam: λ is the share of the image outside the box
        yl, yh, xl, xh = d.box
        assert d.lam == pytest.approx(1 - (yh - yl) * (xh - xl) / (HW[0] * HW[1]))
    assert not any(d.use_cutmix for d in draws(recipe(cutmix_alpha=0.0), 200))
    assert all(d.use_cutmix for d in draws(recipe(mixup_alpha=0.0), 200) if d.mixes)
    assert abs(np.mean([d.lam for d in draws(recipe(cutmix_alpha=0.0), n)]) - 0.5) < 0.02  # Beta(a, a)
    minmax = [d for d in draws(recipe(cutmix_minmax=(0.3, 0.8)), 200) if d.use_cutmix]
    assert minmax  # (flowvision sets cutmix_alpha=1 with a minmax: still switched with mixup)
    for d in minmax:
        yl, yh, xl, xh = d.box
        assert int(HW[0] * 0.3) <= yh - yl < int(HW[0] * 0.8) and int(HW[1] * 0.3) <= xh - xl < int(HW[1] * 0.8)
    disabled = recipe()
    disabled.mixup_enabled = False
    assert not any(d.mixes for d in draws(disabled, 50))


@contextlib.contextmanager
def flowvision_takes(draw):
    """flowvision's batch Mixup, its λ / switch / box decisions replaced by ``draw``'s."""
    pre_lam = 1.0 if not draw.mixes else (0.5 if draw.use_cutmix else draw.lam)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Mixup, "_params_per_batch", lambda self: (pre_lam, draw.use_cutmix))
        patch.setattr(flowvision_mixup, "cutmix_bbox_and_lam", lambda *a, **k: (draw.box, draw.lam))
        yield


def numpy_reference(images, labels, draw, smoothing):
    """The same batch mix, written independently in float64."""
    partner = images[::-1].astype(np.float64)
    mixed = images.astype(np.float64)
    if draw.use_cutmix and draw.mixes:
        yl, yh, xl, xh = draw.box
        mixed[..., yl:yh, xl:xh] = partner[..., yl:yh, xl:xh]
    elif draw.mixes:
        mixed = mixed * draw.lam + partner * (1 - draw.lam)
    one_hot = np.full((len(labels), CLASSES), smoothing / CLASSES)
    one_hot[np.arange(len(labels)), labels] += 1 - smoothing
    return mixed, one_hot * draw.lam + one_hot[::-1] * (1 - draw.lam)


def steps_of_each_kind(mixup):
    """One step that mixes up, one that cuts and mixes, one that leaves the images alone."""
    found = {}
    for step, d in enumerate(draws(mixup, 200)):
        found.setdefault("cutmix" if d.use_cutmix else "mixup" if d.mixes else "none", step)
    return found


@pytest.mark.parametrize("kind", ["mixup", "cutmix", "none"])
def test_one_rank_equals_flowvision_given_the_same_decisions(kind):
    mixup = recipe(prob=0.8)
    step = steps_of_each_kind(mixup)[kind]
    draw = draws(mixup, step + 1)[step]
    images, labels = synthetic_batch()
    with randomness("layout_invariant"), mixup_step(step):
        out = ConsistentBatchTrainer.get_batch(instance(images, labels), mixup_func=mixup)
    mixed, targets = out["images"].to_local().numpy(), out["labels"].to_local().numpy()
    with flowvision_takes(draw):
        stock_images, stock_targets = mixup(flow.tensor(images), flow.tensor(labels))
    assert np.array_equal(mixed, stock_images.numpy()) and np.array_equal(targets, stock_targets.numpy())
    ref_images, ref_targets = numpy_reference(images, labels, draw, 0.1)
    np.testing.assert_allclose(mixed, ref_images, rtol=0, atol=1e-6)
    np.testing.assert_allclose(targets, ref_targets, rtol=0, atol=1e-6)
    assert (kind == "none") == np.array_equal(mixed, images)


def test_fast_mode_keeps_flowvisions_local_mixup():
    images, labels = synthetic_batch()
    mixup = recipe()
    with randomness("fast"):
        np.random.seed(3)
        out = ConsistentBatchTrainer.get_batch(instance(images, labels), mixup_func=mixup)  # no step needed
    np.random.seed(3)
    stock_images, stock_targets = mixup(flow.tensor(images), flow.tensor(labels))
    assert np.array_equal(out["images"].to_local().numpy(), stock_images.numpy())
    assert np.array_equal(out["labels"].to_local().numpy(), stock_targets.numpy())


class PairMixup(Mixup):
    def _mix_batch(self, x):
        return 1.0


@pytest.mark.parametrize("mixup_func, error, message", [
    (recipe(mode="pair"), ValueError, r"dataloader.train.mixup_func.mode='pair'.*mode='batch' only"),
    (recipe(mode="elem"), ValueError, r"dataloader.train.mixup_func.mode='elem'"),
    (recipe(mixup_alpha=0.0, cutmix_alpha=0.0), ValueError, "dataloader.train.mixup_func: mixup_alpha and cutmix"),
    (recipe(prob=1.5), ValueError, r"dataloader.train.mixup_func.prob=1.5"),
    (recipe(label_smoothing=-0.1), ValueError, r"dataloader.train.mixup_func.label_smoothing"),
    (lambda x, y: (x, y), TypeError, "dataloader.train.mixup_func is a function.*train.randomness='fast'"),
    (PairMixup(), TypeError, "dataloader.train.mixup_func is a PairMixup"),
])
def test_options_a_global_mixup_cannot_honour_are_named(mixup_func, error, message):
    with pytest.raises(error, match=message):
        GlobalMixup(mixup_func)


def test_odd_global_batch_and_missing_step_are_named():
    images, labels = synthetic_batch()
    with randomness("layout_invariant"), mixup_step(0):
        with pytest.raises(ValueError, match="even global batch"):
            ConsistentBatchTrainer.get_batch(instance(images[:5], labels[:5]), mixup_func=recipe())
    with randomness("layout_invariant"):
        with pytest.raises(RuntimeError, match="no step is set.*mixup_step"):
            ConsistentBatchTrainer.get_batch(instance(images, labels), mixup_func=recipe())


def test_draws_outside_a_trainer_are_not_numpys():
    """The global stream ignores numpy's state: λ depends on (seed, step) only."""
    images, labels = synthetic_batch()
    outs = []
    for numpy_seed in (0, 1):
        np.random.seed(numpy_seed)
        with randomness("layout_invariant"), mixup_step(5):
            outs.append(ConsistentBatchTrainer.get_batch(instance(images, labels), mixup_func=recipe())
                        ["labels"].to_local().numpy())
    assert np.array_equal(*outs)
    assert isinstance(draws(recipe(), 1)[0], MixDraw)


def test_batch_guard_leaves_the_global_mixup_to_get_batch():
    """The guard checks the pre-mix local batch and hands mixup on: the same batch as unguarded."""
    from libai_ext.engine.batch_check import install_batch_check

    images, labels = synthetic_batch()
    trainer = object.__new__(ConsistentBatchTrainer)  # no loaders or model needed for get_batch
    trainer.iter = 0
    install_batch_check(trainer, "every")
    with randomness("layout_invariant"), mixup_step(1):
        guarded = trainer.get_batch(instance(images, labels), mixup_func=recipe())
        plain = ConsistentBatchTrainer.get_batch(instance(images, labels), mixup_func=recipe())
    for name in ("images", "labels"):
        assert np.array_equal(guarded[name].to_local().numpy(), plain[name].to_local().numpy())
    assert guarded["labels"].shape == (BATCH, CLASSES)


class OneBatchLoop:
    """Stands in for LiBai's EagerTrainer: each run_step takes the batch, calls get_batch as the line does."""

    def __init__(self, mixup):
        self.mixup, self.targets = mixup, []

    def run_step(self, get_batch, *input_placement_device):  # main also passes the device
        out = get_batch(instance(*synthetic_batch()), *input_placement_device, self.mixup)
        self.targets.append(out["labels"].to_local().numpy())


def run_iterations(iterations, mode, numpy_seed):
    """ConsistentBatchTrainer.run_step at ``iterations``, numpy's stream seeded ``numpy_seed`` first."""
    trainer = object.__new__(ConsistentBatchTrainer)  # run_step needs only these
    trainer._trainer = OneBatchLoop(recipe(cutmix_alpha=0.0, label_smoothing=0.0))
    trainer.cfg = DictConfig({"train": {"input_placement_device": "cpu"}})
    np.random.seed(numpy_seed)
    with randomness(mode):
        for trainer.iter in iterations:
            trainer.run_step()
    return trainer._trainer.targets


@pytest.mark.parametrize("mode", ["layout_invariant", "fast"])
def test_resumed_run_draws_the_same_lambda_at_the_same_step(mode):
    """A run resumed at iteration 2 (its host streams elsewhere, as stock LiBai leaves them) mixes
    iterations 2 and 3 as the uninterrupted run did in layout_invariant mode; the local mixup's
    numpy draws do not (libai_ext restores numpy on resume; stock LiBai does not)."""
    uninterrupted = run_iterations(range(4), mode, numpy_seed=0)
    resumed = run_iterations(range(2, 4), mode, numpy_seed=1)
    lams = [targets[0].max() for targets in uninterrupted]  # no smoothing: sample 0's own share, or 1 - it
    assert len(set(lams)) == 4  # every step its own λ
    same = all(np.array_equal(a, b) for a, b in zip(uninterrupted[2:], resumed))
    assert same == (mode == "layout_invariant")
