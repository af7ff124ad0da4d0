"""The global-order sampler and keyed augmentation, in process (multi-rank: test_global_order_layouts.py;
the data position a checkpoint saves: test_data_position.py).

Sampler tests use a synthetic dataset (only its length matters); augmentation tests use the
digits with flowvision's transforms from each of the three streams they draw from.
"""
import logging
import random

import numpy as np
import oneflow as flow
import pytest
from flowvision import transforms as T
from libai.data.build import trivial_batch_collator
from libai.data.samplers import CyclicSampler
from omegaconf import OmegaConf
from oneflow.utils.data import DataLoader

from libai_ext import GlobalOrderBatchSampler, KeyedAugmentation
from libai_ext.data import CIFAR100Folder, EpochBatch, ensure_digits_cifar
from libai_ext.engine.global_loader import use_global_order, wants_global_order
from libai_ext.engine.trainer import check_mixup_func
from libai_ext.random import keyed_streams

SIZE, MICRO = 100, 16  # an epoch: 3 global batches of 32 at dp2, 4 samples dropped


def batches(sampler, count):
    iterator = iter(sampler)
    return [next(iterator) for _ in range(count)]


def global_batches(dp, count, consumed=0, seed=3, sampler=GlobalOrderBatchSampler):
    """Each step's global batch: the data-parallel ranks' batches side by side."""
    per_rank = [batches(sampler(range(SIZE), 2 * MICRO // dp, consumed_samples=consumed, data_parallel_rank=r,
                                data_parallel_size=dp, seed=seed), count) for r in range(dp)]
    return [[i for rank in step for i in rank] for step in zip(*per_rank)]


@pytest.mark.parametrize("dp", [2, 4])
def test_data_parallel_slices_make_the_one_rank_batch(dp):
    one = global_batches(1, 7)
    assert global_batches(dp, 7) == one
    # LiBai's CyclicSampler on the same synthetic dataset: each rank its own bucket.
    assert global_batches(dp, 1, sampler=CyclicSampler)[0] != global_batches(1, 1, sampler=CyclicSampler)[0]


def samples_by_global_position(dp, acc, whole_step=False, steps=7, global_batch=32, consumed=0):
    """{(epoch, step, position in the step's global batch): dataset index} read by every rank,
    each rank's batches checked to come in order: micro-batch m of rank r holds the positions
    [m * S + r * micro, m * S + (r + 1) * micro), S = dp * micro, as 1 rank's micro-batch m does."""
    micro = global_batch // (dp * acc)
    per_step = 1 if whole_step else acc
    read = {}
    for rank in range(dp):
        sampler = GlobalOrderBatchSampler(range(SIZE), micro, consumed_samples=consumed, data_parallel_rank=rank,
                                          data_parallel_size=dp, seed=3, num_accumulation_steps=acc,
                                          whole_step=whole_step)
        first = sampler.position.batch
        for k, batch in enumerate(batches(sampler, steps * per_step)):
            m = (first + k) % per_step
            assert batch.micro_step == m and len(batch) == micro * acc // per_step
            micros = range(acc) if whole_step else [m]
            positions = [mm * dp * micro + rank * micro + i for mm in micros for i in range(micro)]
            assert sampler.step_positions(m).tolist() == positions and batch.first_position == positions[0], (rank, k)
            for index, position in zip(batch, positions):
                key = (batch.epoch, batch.step, position)
                assert key not in read
                read[key] = index
    return read


@pytest.mark.parametrize("dp, acc, whole_step", [(1, 2, False), (2, 1, False), (2, 2, False), (1, 2, True),
                                                 (2, 2, True), (1, 4, False)])
def test_accumulation_reads_the_same_samples_in_the_same_global_positions(dp, acc, whole_step):
    """(dp, acc) with one global batch of 32: the union of what every rank reads per optimizer step is
    the 1-rank global batch, sample by sample (eager: acc micro-batches per rank; LiBai 0.1.1's graph
    mode: the rank's whole slice at once)."""
    one = samples_by_global_position(1, 1)
    assert sorted({(e, t) for e, t, _ in one}) == [(0, 0), (0, 1), (0, 2), (1, 3), (1, 4), (1, 5), (2, 6)]
    assert samples_by_global_position(dp, acc, whole_step) == one


def test_accumulation_keeps_libai_consumed_samples():
    """Global samples so far, counted per loader batch: LiBai's eager resume position after an iteration."""
    sampler = GlobalOrderBatchSampler(range(SIZE), 8, data_parallel_size=2, num_accumulation_steps=2)
    iterator = iter(sampler)
    for micro_steps in range(1, 5):
        next(iterator)
        assert sampler.consumed_samples == micro_steps * 8 * 2
    # A resume after an odd number of micro-steps continues with the step's second micro-batch.
    resumed = samples_by_global_position(2, 2, steps=3, consumed=16)
    straight = samples_by_global_position(2, 2, steps=4)
    # (step, micro-batch) pairs the resumed run did not read: the one before it, the one after its last
    skipped = {(0, 0), (3, 1)}
    assert {k: v for k, v in straight.items() if (k[1], k[2] // 16) not in skipped} == resumed


def test_each_epoch_is_a_fresh_permutation():
    steps = batches(GlobalOrderBatchSampler(range(SIZE), 32, seed=3), 6)
    assert [b.epoch for b in steps] == [0, 0, 0, 1, 1, 1]
    epochs = [[i for b in steps[k:k + 3] for i in b] for k in (0, 3)]
    for order in epochs:
        assert len(set(order)) == len(order) == 96 and set(order) <= set(range(SIZE))
    assert epochs[0] != epochs[1]
    assert global_batches(1, 3, seed=4) != global_batches(1, 3, seed=3)
    assert batches(GlobalOrderBatchSampler(range(SIZE), 32, shuffle=False), 1)[0] == list(range(32))


@pytest.mark.parametrize("dp", [1, 2])
@pytest.mark.parametrize("step", [1, 2, 3, 5])  # 2: epoch 0's last batch, 3: epoch 1's first
def test_resume_from_consumed_samples(dp, step):
    straight = global_batches(dp, step + 2)
    assert global_batches(dp, 2, consumed=step * 32) == straight[step:]


def test_libai_conventions():
    sampler = GlobalOrderBatchSampler(range(SIZE), MICRO, data_parallel_rank=1, data_parallel_size=2, seed=3)
    assert len(sampler) == SIZE  # as CyclicSampler: the dataset size
    batches(sampler, 4)
    assert sampler.consumed_samples == 4 * 2 * MICRO  # global samples, LiBai's resume unit
    sampler.set_consumed_samples(32)
    assert batches(sampler, 1) == [global_batches(2, 2)[1][MICRO:]]


@pytest.mark.parametrize("kwargs, key", [
    (dict(micro_batch_size=0), "train.train_micro_batch_size"),
    (dict(micro_batch_size=8, data_parallel_rank=2, data_parallel_size=2), "train.dist.data_parallel_size"),
    (dict(micro_batch_size=8, consumed_samples=-1), "dataloader.consumed_samples"),
    (dict(micro_batch_size=8, consumed_samples=4), "dataloader.consumed_samples"),
    (dict(micro_batch_size=8, num_accumulation_steps=0), "train.num_accumulation_steps"),
    (dict(micro_batch_size=16, data_parallel_size=2, num_accumulation_steps=4), "train.num_accumulation_steps"),
    (dict(micro_batch_size=64, data_parallel_size=2), "train.train_micro_batch_size x data parallel size"),
])
def test_bad_input_names_the_config_key(kwargs, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        GlobalOrderBatchSampler(range(SIZE), **kwargs)


def test_keyed_streams_restore_python_and_numpy_and_key_all_three():
    draws = []
    for prior in (5, 6):  # other caller states: the keyed draws do not change
        random.seed(prior)
        np.random.seed(prior)
        flow.manual_seed(prior)
        before = random.getstate(), np.random.get_state()[1].copy()
        with keyed_streams(3, 0, 17):
            draws.append((random.random(), np.random.rand(), flow.rand(1).item()))
        assert random.getstate() == before[0] and np.array_equal(np.random.get_state()[1], before[1])
    assert draws[0] == draws[1]
    with keyed_streams(3, 1, 17):
        new_epoch = random.random(), np.random.rand(), flow.rand(1).item()
    assert all(a != b for a, b in zip(new_epoch, draws[0]))


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    root = ensure_digits_cifar(str(tmp_path_factory.mktemp("digits")))
    augment = T.Compose([
        T.RandomResizedCrop(32, scale=(0.5, 1.0)),  # OneFlow's CPU generator
        T.RandomChoice([T.RandomHorizontalFlip(), T.RandomVerticalFlip()]),  # python
        T.RandomCrop(32, padding=4),  # numpy
        T.ColorJitter(brightness=0.4),  # OneFlow
        T.ToTensor(),
    ])
    return CIFAR100Folder(root, train=True, transform=augment)


def images(samples):
    return [s.get("images").tensor.numpy() for s in samples]


def test_a_sample_looks_the_same_wherever_it_is_read(digits):
    keyed = KeyedAugmentation(digits, seed=3)
    first = images(keyed[EpochBatch([4, 9, 2], epoch=0)])
    again = images(keyed[EpochBatch([2, 7, 9, 4], epoch=0)])
    assert np.array_equal(first[0], again[3]) and np.array_equal(first[1], again[2])
    assert np.array_equal(first[2], again[0])
    assert not np.array_equal(first[0], images(keyed[EpochBatch([4], epoch=1)])[0])  # a new epoch
    # The same reads without keys: each sample's crop depends on what was read before it.
    flow.manual_seed(0)
    np.random.seed(0)
    plain = [digits[i].get("images").tensor.numpy() for i in (4, 9, 4)]
    assert not np.array_equal(plain[0], plain[2])


def test_workers_load_what_the_main_process_loads(digits):
    def loader(workers):
        sampler = GlobalOrderBatchSampler(digits, 8, seed=3)
        return DataLoader(KeyedAugmentation(digits, 3), sampler=sampler, batch_size=None, num_workers=workers,
                          collate_fn=trivial_batch_collator)

    main, workers = (batches(loader(n), 3) for n in (0, 2))
    for a, b in zip(main, workers):
        assert np.array_equal(a.get("images").tensor.numpy(), b.get("images").tensor.numpy())


def test_keyed_dataset_refuses_plain_indices(digits):
    with pytest.raises(TypeError, match="EpochBatch"):
        KeyedAugmentation(digits, 3)[4]


def config(**train):
    return OmegaConf.create({"train": train, "dataloader": {"train": {}}})


def test_which_configs_get_the_global_order(caplog):
    assert wants_global_order(config()) and wants_global_order(config(randomness="layout_invariant"))
    assert not wants_global_order(config(randomness="fast"))
    own = config()
    own.dataloader.train.sampler = {"_target_": "my.Sampler"}
    with caplog.at_level(logging.INFO):
        assert not wants_global_order(own)
    assert "sampler is the config's own, kept" in caplog.text
    with pytest.raises(ValueError, match="train.randomness"):
        wants_global_order(config(randomness="exact"))


def test_stock_loader_rebuilt_around_its_dataset(digits):
    stock = DataLoader(digits, batch_sampler=CyclicSampler(digits, 8, shuffle=True, seed=3),
                       collate_fn=trivial_batch_collator)
    stock.mixup_func = "mixup"
    rebuilt = use_global_order(stock, consumed_samples=16)
    assert isinstance(rebuilt.sampler, GlobalOrderBatchSampler) and rebuilt.sampler.consumed_samples == 16
    assert rebuilt.dataset.dataset is digits and len(rebuilt.dataset) == len(digits)
    assert rebuilt.mixup_func == "mixup" and rebuilt.dataset.collate_fn is trivial_batch_collator
    other = DataLoader(digits, batch_size=8)
    assert use_global_order(other) is other


def test_mixup_none_written_as_a_string_is_refused(digits):
    loader = DataLoader(digits, batch_size=8)
    loader.mixup_func = "None"  # what dataloader.train.mixup_func=None gives (Hydra spells None `null`)
    with pytest.raises(ValueError, match=r"dataloader\.train\.mixup_func='None' .*mixup_func=null"):
        check_mixup_func(loader)
    loader.mixup_func = None
    check_mixup_func(loader)


def test_persistent_workers_of_the_stock_loader_stop_and_the_rebuilt_loader_keeps_workers(digits):
    """LiBai main builds its train loader with persistent workers, which OneFlow starts at once.  The
    rebuilt loader keeps the workers but not their persistence (its sampler never ends), and starts
    them at the first batch asked for: after a resume has restored its position."""
    def stock(**workers):
        return DataLoader(digits, batch_sampler=CyclicSampler(digits, 8, shuffle=True, seed=3),
                          collate_fn=trivial_batch_collator, **workers)

    with_workers = stock(num_workers=2, persistent_workers=True)
    started = with_workers._iterator._workers
    assert started and all(w.is_alive() for w in started)
    rebuilt = use_global_order(with_workers)
    for worker in started:
        worker.join(timeout=10)
    assert not any(w.is_alive() for w in started), "the stock loader's workers still run"
    assert rebuilt.num_workers == 2 and not rebuilt.persistent_workers
    iter(rebuilt)
    assert rebuilt.sampler.consumed_samples == 0, "workers started before the first batch was asked for"
    reference = use_global_order(stock())
    for a, b in zip(batches(rebuilt, 2), batches(reference, 2)):
        assert np.array_equal(a.get("images").tensor.numpy(), b.get("images").tensor.numpy())
