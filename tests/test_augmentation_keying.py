"""Augmentation keyed by what it does: every random transform flowvision ships gives a sample the same result on any
layout, and the check by effect names a transform whose draws are not keyed.

In process (quick tier):

* the inventory of flowvision's random transforms, made from the installed package's code, has a case for each
  (``rank_scripts/augmentation_cases.py``), so a transform a new flowvision adds fails here until it has one;
* per transform: a keyed sample is the same whatever was read before it and whatever the generators held, where
  the stock reads of the same samples from seeded streams differ with the read order;
* the check by effect (``libai_ext.random.augmentation_check``): passes every case at every batch; refuses, naming
  the transform by its path, a generator it cannot key (inside a ``Compose`` inside a ``RandomApply``, inside a
  two-crop wrapper's Compose) and OneFlow's ``rand`` held by a reference taken before the wrappers, both when it
  starts mid-epoch (the periodic check) and on the first batch (the generator-state probe); ``"warn"`` warns once
  and trains on; its config keys are checked by name.

Through LiBai's real train loader on 2 ranks, the main process reading (quick tier, one launch) and on dp2 and
dp4 with 0 and 2 loader workers (long tier): each sample's digest of every case equals the one this test process
computes keyed on 1 rank, also after a resume from ``consumed_samples``; stock LiBai's (``DefaultTrainer``, ranks
seeded ``seed + rank``) differs.  The ViT with crop, flip, RandAugment, ColorJitter, blur and RandomErasing trained
on dp2, reading in the main process, gives 1 rank's losses, stock's do not (long tier).
No batch here is synthetic: the samples are the digits, read as a CIFAR folder.
"""
import logging
import os
import random

import numpy as np
import oneflow as flow
import pytest
from flowvision import transforms as T
from PIL import Image

from augmentation_cases import CASES, NOT_PER_SAMPLE, AllCases, TwoCrops, digest, drawing_classes
from conftest import long_tier_selected, records_of_every_rank, rank_script
from libai_ext.data import KeyedAugmentation, ensure_digits_cifar
from libai_ext.random.augmentation_check import AugmentationCheck, UnkeyedAugmentationError
from libai_ext.random.global_order import EpochBatch
from libai_ext.random.layers.stochastic_ops import route_stochastic_ops
from libai_ext.random.owned_generators import find_owned_generators
from libai_ext.testing import launch

SEED = 0  # train.seed of the rank script's loader config: the augmentation keys' seed
ORDER = [5, 1, 7, 3, 0, 6, 2, 4]


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    return ensure_digits_cifar(str(tmp_path_factory.mktemp("digits")))


@pytest.fixture(scope="module", autouse=True)
def wrappers():
    route_stochastic_ops()  # what the trainer installs: OneFlow's random ops report their calls


class OneCase(flow.utils.data.Dataset):
    """The first digits through one transform."""

    def __init__(self, root, transform, count=16):
        self.images = AllCases.__mro__[1](root, train=True, max_samples=count).data
        self.transform = transform

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        return self.transform(Image.fromarray(self.images[index]))


def keyed_reader(dataset, check=None):
    return KeyedAugmentation(dataset, SEED, owned_generators=find_owned_generators(dataset, "dataset"), check=check)


def digests(samples):
    return [digest(sample) if isinstance(sample, flow.Tensor) else digest(flow.tensor(np.asarray(sample)))
            for sample in samples]


# ---- the inventory --------------------------------------------------------------------------------------------------

def test_the_inventory_covers_every_random_transform_flowvision_ships():
    found = drawing_classes()
    assert len(found) >= 15, sorted(found)  # flowvision 0.1.0: 16; fewer means the inventory lost its way
    missing = sorted(set(found) - set(CASES) - set(NOT_PER_SAMPLE))
    assert not missing, f"random transforms of flowvision without a test case: {missing}"


# ---- per transform, in process --------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", sorted(CASES))
def test_a_keyed_sample_does_not_depend_on_what_was_read_before(digits, case):
    keyed = keyed_reader(OneCase(digits, CASES[case]()))
    forward = digests(keyed[EpochBatch(list(range(8)), epoch=0)])
    random.seed(99), np.random.seed(99), flow.manual_seed(99)  # the caller's streams elsewhere
    shuffled = digests(keyed[EpochBatch(ORDER, epoch=0)])
    assert [shuffled[ORDER.index(i)] for i in range(8)] == forward
    assert digests(keyed[EpochBatch(list(range(8)), epoch=1)]) != forward  # a new epoch draws anew
    # Stock: the same streams seeded alike, the samples read in another order, augment differently.
    plain = OneCase(digits, CASES[case]())
    stock = []
    for order in (list(range(8)), ORDER):
        random.seed(7), np.random.seed(7), flow.manual_seed(7)
        read = digests([plain[i] for i in order])
        stock.append([read[order.index(i)] for i in range(8)])
    assert stock[0] != stock[1]


# ---- the check by effect --------------------------------------------------------------------------------------------

class HiddenBrightness:
    """A transform with a generator libai_ext does not find (a closure over a list): not keyed."""

    def __init__(self):
        state = [7]

        def step():
            state[0] = (state[0] * 1103515245 + 12345) % 2 ** 31
            return state[0] / 2 ** 31

        self.draw = lambda: step()

    def __call__(self, img):
        return T.functional.adjust_brightness(img, 0.5 + self.draw())


class EarlyReference:
    """Draws through OneFlow's own ``rand``, held by a default argument (taken before the wrappers), from
    sample ``start`` on."""

    def __init__(self, start=0):
        self.start = start

    def __call__(self, tensor, rand=getattr(flow._C.rand, "__wrapped__", flow._C.rand)):
        return tensor * (0.5 + float(rand(1).numpy()[0]))


class Indexed(OneCase):
    def __getitem__(self, index):
        transform = self.transform
        if isinstance(transform.transforms[-1], EarlyReference) and index < transform.transforms[-1].start:
            transform = T.Compose(transform.transforms[:-1])
        return transform(Image.fromarray(self.images[index]))


def read_epoch(keyed, epoch=0, batches=4, size=4):
    return [keyed[EpochBatch(list(range(b * size, (b + 1) * size)), epoch=epoch)] for b in range(batches)]


def test_the_check_passes_every_flowvision_transform_at_every_batch(digits):
    keyed = keyed_reader(OneCase(digits, T.Compose([CASES[c]() for c in ("RandomResizedCrop",)])),
                         AugmentationCheck(first_batches=0, period=1))
    read_epoch(keyed, batches=2)
    every = KeyedAugmentation(AllCases(digits, count=8), SEED, check=AugmentationCheck(first_batches=0, period=1))
    read_epoch(every, batches=2)
    assert every.check.reads == 2


def test_the_check_refuses_an_unkeyed_transform_naming_it_inside_nested_composes(digits):
    nested = T.Compose([T.RandomResizedCrop(32), T.RandomApply([T.Compose([T.RandomHorizontalFlip(), HiddenBrightness()])],
                                                              p=1.0), T.ToTensor()])
    keyed = keyed_reader(OneCase(digits, nested), AugmentationCheck())
    with pytest.raises(UnkeyedAugmentationError, match=r"dataset\.transform\.transforms\[1\]\.transforms\[0\]"
                                                       r"\.transforms\[1\] \(HiddenBrightness\) draws random numbers "
                                                       r"that are not keyed"):
        read_epoch(keyed)
    assert nested.transforms[1].transforms[0].transforms[1].__class__ is HiddenBrightness  # put back


def test_the_check_names_a_transform_inside_a_two_crop_wrapper(digits):
    wrapper = TwoCrops(T.Compose([T.RandomResizedCrop(32), T.ToTensor()]),
                       T.Compose([T.RandomHorizontalFlip(), HiddenBrightness(), T.ToTensor()]))
    with pytest.raises(UnkeyedAugmentationError, match=r"dataset\.transform\.base_transform2\.transforms\[1\] "
                                                       r"\(HiddenBrightness\)"):
        read_epoch(keyed_reader(OneCase(digits, wrapper), AugmentationCheck()))


def test_warn_names_the_transform_once_and_reads_on(digits, caplog):
    keyed = keyed_reader(OneCase(digits, T.Compose([HiddenBrightness(), T.ToTensor()])),
                         AugmentationCheck(action="warn", first_batches=2, period=1))
    with caplog.at_level(logging.WARNING, logger="libai_ext.random.augmentation_check"):
        assert len(read_epoch(keyed)) == 4
    warned = [r.getMessage() for r in caplog.records if "not keyed per sample" in r.getMessage()]
    assert len(warned) == 1 and "dataset.transform.transforms[0] (HiddenBrightness)" in warned[0], warned


def test_the_check_catches_a_reference_taken_before_the_wrappers_from_mid_epoch(digits):
    """The main process looks at OneFlow's generator state on an epoch's first batch only: a draw through a
    reference the wrappers never see, starting at sample 8, is caught by the periodic check."""
    transform = T.Compose([T.ToTensor(), EarlyReference(start=8)])
    keyed = keyed_reader(Indexed(digits, transform, count=16), AugmentationCheck(first_batches=1, period=2))
    with pytest.raises(UnkeyedAugmentationError, match=r"dataset\.transform\.transforms\[1\] \(EarlyReference\)"):
        read_epoch(keyed)
    assert not keyed.draws_from_oneflow and keyed.check.reads == 3  # caught at batch 2, the first that draws


def test_the_check_refuses_a_reference_taken_before_the_wrappers_on_the_first_batch(digits):
    transform = T.Compose([T.ToTensor(), EarlyReference()])
    keyed = keyed_reader(OneCase(digits, transform), AugmentationCheck())
    with pytest.raises(UnkeyedAugmentationError, match=r"through a function libai_ext's wrappers of OneFlow's "
                                                       r"random ops do not see.*transforms\[1\] \(EarlyReference\)"):
        read_epoch(keyed)
    # Without the check (or with "warn"), as before: warned about and keyed from that batch on.
    warned = keyed_reader(OneCase(digits, transform), AugmentationCheck(action="warn"))
    read_epoch(warned, batches=1)
    assert warned.draws_from_oneflow


class Tokens(flow.utils.data.Dataset):
    """Samples as LiBai's NLP datasets give them: an ``Instance`` of ``DistTensorData``."""

    def __len__(self):
        return 4

    def __getitem__(self, index):
        from libai.data.structures import DistTensorData, Instance

        return Instance(input_ids=DistTensorData(flow.LongTensor([index] * 8)))


def test_the_check_passes_a_one_sample_batch_that_libais_collate_changes_in_place():
    """LiBai's ``Instance.stack`` of one sample adds the batch dimension to that sample itself (ChatGLM's dp2 x
    accumulation 8 reads one sample a micro-batch): the check compares the sample as read, before the collate."""
    from libai.data.structures import Instance

    keyed = KeyedAugmentation(Tokens(), SEED, collate_fn=Instance.stack, check=AugmentationCheck(first_batches=2))
    batches = [keyed[EpochBatch([index], epoch=0)] for index in (1, 2)]
    assert [tuple(b.get("input_ids").tensor.shape) for b in batches] == [(1, 8), (1, 8)]
    assert keyed.check.reads == 2


def test_the_check_runs_on_the_first_batches_then_every_period(monkeypatch):
    def checked_reads(check, reads):
        verified = []
        monkeypatch.setattr(check, "verify", lambda *args: verified.append(check.reads - 1))
        keyed = KeyedAugmentation(Tokens(), SEED, check=check)
        for _ in range(reads):
            keyed._verify(EpochBatch([1], epoch=0), 0, ["sample"], oneflow=False)
        return verified

    assert checked_reads(AugmentationCheck(first_batches=2, period=3), 9) == [0, 1, 4, 7]
    assert checked_reads(AugmentationCheck(first_batches=1, period=0), 4) == [0]


def test_the_check_config_keys_are_read_and_checked_by_name():
    from omegaconf import OmegaConf

    from libai_ext.config.keys import key_names

    assert {"train.augmentation_check.action", "train.augmentation_check.first_batches",
            "train.augmentation_check.period"} <= set(key_names())
    check = AugmentationCheck.from_config(OmegaConf.create({"train": {}}))
    assert (check.action, check.first_batches, check.period) == ("refuse", 2, 50)
    assert AugmentationCheck.from_config(OmegaConf.create({"train": {"augmentation_check": {"action": "off"}}})) is None
    with pytest.raises(ValueError, match=r"train\.augmentation_check\.action='stop'"):
        AugmentationCheck(action="stop")
    with pytest.raises(ValueError, match=r"train\.augmentation_check\.period=-1"):
        AugmentationCheck(period=-1)


# ---- through LiBai's real loader on ranks ---------------------------------------------------------------------------

LAYOUTS = {"dp2": 2, "dp4": 4}
WORKERS = (0, 2)


def reference(digits, records):
    """{index: digests} keyed on 1 rank, in this process, for every index the records read."""
    indices = sorted({i for r in records for i in r["indices"]})
    keyed = KeyedAugmentation(AllCases(digits), SEED)
    samples = keyed[EpochBatch(indices, epoch=0)]
    return {i: s.get("digests").tensor.numpy().tolist() for i, s in zip(indices, samples)}


def launch_layout(digits, nproc, workers):
    """``{worker count: records}`` of one launch that reads with each of ``workers`` in turn."""
    result = launch(rank_script("augmentation_layouts.py"), nproc, ["--data", digits, "--workers", *workers],
                    timeout=900)
    by_rank = records_of_every_rank(result)
    for rank, records in by_rank.items():
        assert records[-1] == {"variant": "summary", "cases": list(CASES)}, f"rank {rank} did not finish"
    return {count: [r for records in by_rank.values() for r in records[:-1] if r["workers"] == count]
            for count in workers}


@pytest.fixture(scope="module")
def every_loader(digits):
    """``{layout: {worker count: records}}``: the long tier's launches, one per layout for every worker count."""
    return {layout: launch_layout(digits, nproc, WORKERS) for layout, nproc in LAYOUTS.items()}


def compare(digits, records):
    """{variant: [(case, index) whose digest differs from 1 rank's keyed one]}, every variant's samples counted."""
    expected = reference(digits, records)
    differing, counted = {}, {}
    for record in records:
        for index, row in zip(record["indices"], record["digests"]):
            counted[record["variant"]] = counted.get(record["variant"], 0) + 1
            differing.setdefault(record["variant"], []).extend(
                (case, index) for case, a, b in zip(CASES, row, expected[index]) if a != b)
    return differing, counted


def check_layout(digits, records, nproc):
    differing, counted = compare(digits, records)
    assert counted == {"layout_invariant": 32, "resume": 16, "stock": 16}, counted
    assert differing["layout_invariant"] == [] and differing["resume"] == []
    if nproc > 1:  # stock: each rank augments from its own stream
        assert len({case for case, _ in differing["stock"]}) >= len(CASES) // 2, differing["stock"]


def test_dp2_reading_in_the_main_process_augments_as_one_rank(request, digits):
    """(Where the long tier runs too, read from its dp2 launch, which holds this case.)"""
    if long_tier_selected(request):
        records = request.getfixturevalue("every_loader")["dp2"][0]
    else:
        records = launch_layout(digits, 2, [0])[0]
    check_layout(digits, records, 2)


@pytest.mark.long
@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_layout_and_loader_augments_as_one_rank(every_loader, digits, layout, workers):
    if (layout, workers) == ("dp2", 0):
        pytest.skip("the quick tier's case")
    check_layout(digits, every_loader[layout][workers], LAYOUTS[layout])


# ---- one config trained ----------------------------------------------------------------------------------------------

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def train_losses(tmp_path, name, nproc, *overrides):
    from libai_ext.testing import read_raw_losses

    output = tmp_path / name
    launch(os.path.join(REPO, "tools", "train_net.py"), nproc, [
        "--config-file", os.path.join(REPO, "tests", "configs", "vit_digits_augment_cpu.py"),
        f"train.output_dir={output}", f"dataloader.train.dataset.0.root.root={tmp_path / 'digits'}",
        f"train.train_micro_batch_size={8 // nproc}", *overrides], timeout=600)
    return [record["total_loss"] for record in read_raw_losses(str(output))]


@pytest.mark.long
def test_a_dp2_run_of_one_config_gives_one_ranks_losses(tmp_path):
    one, dp2 = train_losses(tmp_path, "one", 1), train_losses(tmp_path, "dp2", 2)
    assert len(one) == 3, one
    np.testing.assert_allclose(dp2, one, rtol=1e-5)
    stock = train_losses(tmp_path, "stock", 2, "train.trainer=libai.engine.DefaultTrainer")
    assert not np.allclose(stock, one, rtol=1e-5), (stock, one)
