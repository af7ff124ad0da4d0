"""Randomness the data pipeline owns: generators held by a dataset, and a ``collate_fn`` that draws.

Under ``train.randomness="layout_invariant"`` the rebuilt train loader re-seeds every generator the
dataset holds per sample (so a sample reads the same on any rank, in any worker) and refuses a
``collate_fn`` that draws, naming it.  LiBai's BERT dataset, which builds ``RandomState(seed + idx)``
inside ``__getitem__``, is already keyed per sample and passes untouched.
"""
import inspect
import logging
import random

import numpy as np
import oneflow as flow
import pytest
from libai.data.samplers import CyclicSampler
from oneflow.utils.data import DataLoader, Dataset

from libai_ext.data import KeyedAugmentation
from libai_ext.random.global_order import EpochBatch
from libai_ext.engine import global_loader
from libai_ext.engine.global_loader import order_train_loaders, use_global_order
from libai_ext.random.owned_generators import find_owned_generators

SIZE, MICRO, SEED = 40, 8, 3


class Jitter:
    """A transform with a OneFlow generator of its own."""

    def __init__(self):
        self.generator = flow.Generator()
        self.generator.manual_seed(0)

    def __call__(self, value):
        return value + flow.rand(1, generator=self.generator).item()


class OwnGenerators(Dataset):
    """Sample ``i``: ``(i, draws from four generators it holds)`` -- one of them shared by the class."""
    shared = random.Random(0)

    def __init__(self):
        self.rng = np.random.default_rng(0)
        self.legacy = np.random.RandomState(0)
        self.transforms = [Jitter()]

    def __len__(self):
        return SIZE

    def __getitem__(self, index):
        draws = self.rng.random() + self.legacy.rand() + self.shared.random()
        return index, self.transforms[0](draws)


def as_tuples(samples):
    """A collate_fn of the user's own that draws nothing."""
    return list(samples)


def stock_loader(dataset, dp=1, rank=0, collate_fn=as_tuples, **options):
    sampler = CyclicSampler(dataset, MICRO // dp, shuffle=True, seed=SEED, data_parallel_rank=rank,
                            data_parallel_size=dp)
    return DataLoader(dataset, batch_sampler=sampler, collate_fn=collate_fn, **options)


def samples(loader, count):
    iterator = iter(loader)
    return dict(pair for _ in range(count) for pair in next(iterator))


def test_owned_generators_are_found_with_their_paths():
    sites = {site.path: site.kind for site in find_owned_generators(OwnGenerators(), "dataset")}
    assert sites == {"dataset.rng": "numpy.random.Generator", "dataset.legacy": "numpy.random.RandomState",
                     "dataset.transforms[0].generator": "oneflow.Generator", "dataset.shared": "random.Random"}


def test_owned_generators_are_seeded_per_sample():
    """Each sample reads the same on 1 rank, on each of dp2's ranks and in loader workers."""
    one = samples(use_global_order(stock_loader(OwnGenerators())), 4)
    dp2 = {}
    for rank in range(2):
        dp2.update(samples(use_global_order(stock_loader(OwnGenerators(), dp=2, rank=rank)), 4))
    workers = samples(use_global_order(stock_loader(OwnGenerators(), num_workers=2)), 4)
    assert len(one) == 4 * MICRO and one == dp2 == workers
    # Stock: the draws follow the read order, so a sample's value depends on what was read before it.
    dataset = OwnGenerators()
    assert dataset[5] != dataset[5]


def test_a_generator_that_cannot_be_seeded_is_refused_by_path(monkeypatch):
    def cannot(generator, seed):
        raise TypeError("a bit generator of its own kind")

    monkeypatch.setattr(global_loader, "reseed", cannot)
    with pytest.raises(ValueError, match=r"numpy\.random\.Generator at dataset\.rng cannot be seeded"):
        use_global_order(stock_loader(OwnGenerators()))


def draws_numpy(samples):
    return [(i, v + np.random.rand()) for i, v in samples]


def test_a_collate_fn_that_draws_is_refused_by_name():
    with pytest.raises(ValueError, match=r"dataloader\.train\.collate_fn=draws_numpy draws random numbers "
                                         r"\(numpy\.random\).*train\.randomness='fast'"):
        use_global_order(stock_loader(OwnGenerators(), collate_fn=draws_numpy))


def test_a_collate_fn_holding_a_generator_is_refused_by_path():
    generator = random.Random(1)

    def jitter(samples):
        return [(i, v + generator.random()) for i, v in samples]

    with pytest.raises(ValueError, match=r"random\.Random at collate_fn\.<closure generator>"):
        use_global_order(stock_loader(OwnGenerators(), collate_fn=jitter))


def test_collate_runs_in_streams_keyed_by_the_batch():
    """Whatever a collate_fn draws (the probe can miss a rare draw) is the same in a worker and after a
    resume: it is keyed by (seed, epoch, step, first global position)."""
    keyed = KeyedAugmentation(range(SIZE), SEED, collate_fn=lambda s: np.random.rand())
    first = keyed[EpochBatch([1, 2], epoch=0, step=4, first_position=8)]
    np.random.seed(99)  # the caller's stream does not matter
    assert keyed[EpochBatch([1, 2], epoch=0, step=4, first_position=8)] == first
    assert keyed[EpochBatch([1, 2], epoch=0, step=5, first_position=8)] != first


def test_outside_the_global_order_owned_generators_are_named(caplog):
    cfg = {"train": {"global_batch_size": MICRO}}
    from omegaconf import OmegaConf

    with caplog.at_level(logging.WARNING):
        train, _, _ = order_train_loaders(OmegaConf.create(cfg), stock_loader(OwnGenerators()), None, None,
                                          global_order=False)
    assert "dataset.transforms[0].generator (oneflow.Generator)" in caplog.text
    assert train.data_position.state_dict() == {"kind": "global_batch", "global_batch_size": MICRO,
                                                "sampler": "CyclicSampler"}


@pytest.fixture(scope="module")
def bert_dataset(tmp_path_factory):
    """LiBai's BertDataset (either line's) over a 20-document mmap corpus written with LiBai's own builder."""
    from libai.data.data_utils.indexed_dataset import MMapIndexedDatasetBuilder, make_dataset
    from libai.data.datasets.bert_dataset import BertDataset
    from libai.tokenizer import BertTokenizer

    folder = tmp_path_factory.mktemp("bert")
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] +
                                                [f"w{i}" for i in range(40)]))
    prefix = str(folder / "corpus")
    builder, rng = MMapIndexedDatasetBuilder(prefix + ".bin", dtype=np.int32), np.random.RandomState(0)
    for _ in range(20):
        for _ in range(4):
            builder.add_item(flow.tensor(rng.randint(5, 45, size=rng.randint(3, 8)), dtype=flow.int32))
        builder.end_document()
    builder.finalize(prefix + ".idx")
    tokenizer, corpus = BertTokenizer(str(folder / "vocab.txt")), make_dataset(prefix, "mmap", True)
    if "max_num_samples" in inspect.signature(BertDataset).parameters:  # LiBai main
        return BertDataset("train", tokenizer, corpus, prefix, max_num_samples=20, mask_lm_prob=0.15,
                           max_seq_length=24)
    return BertDataset(tokenizer, prefix, corpus, max_seq_length=24, binary_head=True)


def test_libai_bert_dataset_is_keyed_already_and_not_refused(bert_dataset):
    from libai.data.build import trivial_batch_collator

    assert find_owned_generators(bert_dataset, "dataset") == []
    stock = DataLoader(bert_dataset, batch_sampler=CyclicSampler(bert_dataset, 4, shuffle=True, seed=SEED),
                       collate_fn=trivial_batch_collator)
    rebuilt = use_global_order(stock)
    batch = next(iter(rebuilt))
    indices = rebuilt.sampler.batch_at(rebuilt.sampler.position_at(0))
    direct = trivial_batch_collator([bert_dataset[i] for i in indices])
    for field in ("input_ids", "lm_labels", "ns_labels"):
        assert np.array_equal(batch.get(field).tensor.numpy(), direct.get(field).tensor.numpy()), field


def test_sample_seeds_are_what_seed_streams_and_a_keyed_read_set():
    from libai_ext.random import sample_seeds, seed_streams

    python_seed, numpy_seed, oneflow_seed = sample_seeds(7, 2, 11)
    seed_streams(7, 2, 11)
    streams = random.random(), np.random.random(), flow.rand(1).item()
    random.seed(python_seed)
    np.random.seed(numpy_seed)
    flow.manual_seed(oneflow_seed)
    assert (random.random(), np.random.random(), flow.rand(1).item()) == streams

    class Draws(Dataset):
        def __getitem__(self, index):
            return random.random(), np.random.random(), flow.rand(1).item()

        def __len__(self):
            return 20

    assert KeyedAugmentation(Draws(), 7)[EpochBatch([11], epoch=2)] == [streams]
