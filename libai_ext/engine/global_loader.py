"""The loaders of ``train.randomness="layout_invariant"``: global order, keyed augmentation, saved position.

Where the config passes no sampler, ``use_global_order`` rebuilds LiBai's ``CyclicSampler`` train loader around the
same dataset with ``GlobalOrderBatchSampler`` (each step's global batch is the same samples on any data-parallel size
and accumulation split), ``KeyedAugmentation`` (each sample augmented from (seed, epoch, index); generators the dataset
owns re-seeded per sample; the ``collate_fn`` run inside keyed streams) and a ``DataPosition`` that checkpoints save.
The stock loader's position (``consumed_samples``), seed, shard, workers, collate function and ``mixup_func`` are kept.
Refused at build time, naming it: a ``collate_fn`` seen drawing random numbers (its draws would depend on the batch's
split between ranks and micro-batches) and a dataset-owned generator that cannot be re-seeded. A config's own sampler
and the "fast" mode keep their loader, with a ``GlobalBatchGuard`` (a resume under another global batch is refused)
and a warning naming generators the dataset owns. ``use_global_test_order`` walks LiBai's test loaders
(``SingleRoundSampler``) in one global order (``random.eval_order``). Details: docs/data_order.md.
"""
import logging

from libai.config import try_get_key
from libai.data.build import trivial_batch_collator
from libai.data.samplers import CyclicSampler, SingleRoundSampler
from oneflow.utils.data import DataLoader

from ..data.ordered_loader import GlobalOrderLoader
from ..data.position import GLOBAL_BATCH_KEYS as DATA_POSITION_KEYS
from ..data.position import DataPosition, GlobalBatchGuard
from ..random import DEFAULT_RANDOMNESS, check_randomness, oneflow_draws
from ..random.augmentation_check import AugmentationCheck
from ..random.eval_order import GlobalOrderTestSampler
from ..random.global_order import GlobalOrderBatchSampler
from ..random.keyed_dataset import KeyedAugmentation
from ..random.owned_generators import find_owned_generators, reseed
from ..random.stream_probe import streams_drawn_by

logger = logging.getLogger(__name__)
COLLATE_KEY = "dataloader.train.collate_fn"
_DETERMINISTIC_COLLATES = (trivial_batch_collator,)  # LiBai's own: Instance.stack, nothing drawn


def layout_invariant(cfg):
    return check_randomness(try_get_key(cfg, "train.randomness", default=DEFAULT_RANDOMNESS)) == "layout_invariant"


def wants_global_order(cfg):
    """Layout-invariant randomness and no sampler of the config's own (read before building)."""
    if not layout_invariant(cfg):
        return False
    if try_get_key(cfg, "dataloader.train.sampler", default=None) is not None:
        logger.info("train.randomness=layout_invariant: dataloader.train.sampler is the config's own, kept "
                    "(global batches and augmentation then follow that sampler, not the layout-invariant order)")
        return False
    return True


def order_train_loaders(cfg, train, valid, test, global_order):
    """The loaders ``build_train_loader`` returns: rebuilt in the global order when ``global_order``;
    the train loader always has a ``data_position`` (a checkpointable)."""
    if global_order:
        train = use_global_order(train, try_get_key(cfg, "dataloader.train.consumed_samples", default=0),
                                 try_get_key(cfg, "train.train_micro_batch_size", default=None),
                                 try_get_key(cfg, "train.num_accumulation_steps", default=None) or 1,
                                 check=AugmentationCheck.from_config(cfg))
        valid, test = use_global_test_order(valid), use_global_test_order(test)
    if not hasattr(train, "data_position"):
        warn_unkeyed_generators(train)
        global_batch = try_get_key(cfg, "train.global_batch_size", default=None)
        sampler = getattr(train, "batch_sampler", None) or getattr(train, "sampler", None)
        guard = None if global_batch is None else GlobalBatchGuard(global_batch, type(sampler).__name__)
        try:
            train.data_position = guard
        except AttributeError:  # a loader that takes no attributes: resumes unguarded, as stock LiBai
            logger.warning(f"the train loader ({type(train).__name__}) cannot carry a data position: a resume "
                           f"under another {DATA_POSITION_KEYS} is not detected")
    return train, valid, test


def use_global_order(loader, consumed_samples=0, micro_batch_size=None, num_accumulation_steps=1, check=None):
    """``loader`` rebuilt with the global-order sampler and keyed augmentation, starting after
    ``consumed_samples`` global samples (or as is, logged, where it is not a stock LiBai train loader).

    ``micro_batch_size``: ``train.train_micro_batch_size`` (default: the loader's batch); the loader's batch is that, or
    that times ``num_accumulation_steps`` (LiBai 0.1.1's graph mode). The position is an argument because, with workers,
    LiBai main's loader has already advanced its sampler by what its persistent workers prefetched. ``check``: the
    keyed augmentation's check by effect (``random.augmentation_check.AugmentationCheck``), or None."""
    stock = getattr(loader, "batch_sampler", None)
    if not isinstance(loader, DataLoader) or type(stock) is not CyclicSampler:
        logger.warning(f"train.randomness=layout_invariant: the train loader ({type(loader).__name__} with "
                       f"{type(stock).__name__}) is not LiBai's CyclicSampler loader; kept as built, so its global "
                       "batches may depend on the data-parallel layout")
        return loader
    micro = stock.micro_batch_size if micro_batch_size is None else int(micro_batch_size)
    sampler = GlobalOrderBatchSampler(
        loader.dataset, micro, shuffle=stock.shuffle, consumed_samples=consumed_samples,
        data_parallel_rank=stock.data_parallel_rank, data_parallel_size=stock.data_parallel_size, seed=stock.seed,
        num_accumulation_steps=num_accumulation_steps,
        whole_step=_holds_whole_steps(stock.micro_batch_size, micro, num_accumulation_steps))
    owned = keyable_generators(loader.dataset)
    # The keyed reads learn of OneFlow draws from the wrappers (the trainer installs them with the model; a loader
    # built on its own needs them too): without them no draw could be put in call order.
    oneflow_draws.watch_oneflow_draws()
    check_collate(loader.collate_fn, KeyedAugmentation(loader.dataset, stock.seed, None, owned), sampler)
    _stop_workers(loader)
    keyed = KeyedAugmentation(loader.dataset, stock.seed, loader.collate_fn, owned, check)
    rebuilt = GlobalOrderLoader(keyed, sampler, **_options(loader, persistent_workers=False))
    rebuilt.mixup_func = getattr(loader, "mixup_func", None)
    rebuilt.data_position = DataPosition(rebuilt)
    logger.info(f"train.randomness=layout_invariant: train samples in one global order per (seed, epoch) "
                f"(data-parallel shard {sampler.data_parallel_rank} of {sampler.data_parallel_size}, global batch "
                f"{sampler.global_batch_size} in {sampler.batches_per_step} batch(es) of {sampler.batch_size} a rank, "
                f"from sample {sampler.consumed_samples}), augmentation keyed by (seed, epoch, index); "
                f"LiBai's CyclicSampler replaced")
    return rebuilt


def _holds_whole_steps(loader_batch, micro, accumulation):
    if loader_batch == micro:
        return False
    if loader_batch == micro * accumulation:
        return True
    raise ValueError(f"the train loader's batch of {loader_batch} is neither train.train_micro_batch_size={micro} "
                     f"nor that times train.num_accumulation_steps={accumulation}")


def keyable_generators(dataset):
    """The generators ``dataset`` owns, each checked to accept a new seed (refused by path if one does not)."""
    sites = find_owned_generators(dataset, "dataset")
    for site in sites:
        try:
            reseed(site.resolve(dataset), 0)
        except Exception as e:  # noqa: BLE001 (any failure means: cannot be keyed)
            raise ValueError(
                f"train.randomness=layout_invariant: the train dataset's {site.kind} at {site.path} cannot be seeded "
                f"again per sample ({e}); its draws would depend on which rank and loader worker reads each sample. "
                "Draw from python random, numpy's global stream or OneFlow's default generator instead (keyed per "
                "sample), or set train.randomness='fast'") from None
    if sites:
        logger.info("train.randomness=layout_invariant: generators the train dataset owns, seeded per sample from "
                    "(seed, epoch, index, path): " + ", ".join(f"{s.path} ({s.kind})" for s in sites))
    return sites


def check_collate(collate_fn, keyed_dataset, sampler):
    """Refuse a ``collate_fn`` that draws random numbers (or holds a generator), naming it.

    Its draws depend on which samples one call sees, and that is the split of the global batch
    between data-parallel ranks and micro-batches.  Probed once on this rank's first batch.
    """
    if collate_fn is None or collate_fn in _DETERMINISTIC_COLLATES:
        return
    name = f"{COLLATE_KEY}={getattr(collate_fn, '__qualname__', type(collate_fn).__name__)}"
    sites = find_owned_generators(collate_fn, "collate_fn")
    drawn = [f"{s.kind} at {s.path}" for s in sites] or streams_drawn_by(
        collate_fn, keyed_dataset[sampler.batch_at(sampler.position)])
    if drawn:
        raise ValueError(
            f"train.randomness=layout_invariant: {name} draws random numbers ({', '.join(drawn)}); what it draws "
            "would depend on how the global batch is split between data-parallel ranks and micro-batches. Move the "
            "random part into the dataset's __getitem__ or its transforms (keyed per sample by (train.seed, epoch, "
            "index)), or set train.randomness='fast'")


def warn_unkeyed_generators(loader):
    """Outside the global order nothing is keyed: name the generators the dataset and collate_fn own."""
    sites = find_owned_generators(getattr(loader, "dataset", None), "dataset")
    sites += find_owned_generators(getattr(loader, "collate_fn", None), "collate_fn")
    if sites:
        logger.warning("the train loader keeps its own sampler and streams (train.randomness='fast' or the config's "
                       "own sampler): these generators draw in read order, so their numbers depend on the layout and "
                       "the loader workers: " + ", ".join(f"{s.path} ({s.kind})" for s in sites))


def use_global_test_order(loader):
    """A LiBai test loader (``SingleRoundSampler``) rebuilt to walk one global order (``random.eval_order``);
    anything else (None, another sampler) is returned as is."""
    stock = getattr(loader, "batch_sampler", None)
    if not isinstance(loader, DataLoader) or type(stock) is not SingleRoundSampler:
        return loader
    sampler = GlobalOrderTestSampler(loader.dataset, stock.micro_batch_size, shuffle=stock.shuffle,
                                     data_parallel_rank=stock.data_parallel_rank,
                                     data_parallel_size=stock.data_parallel_size, seed=stock.seed)
    _stop_workers(loader)
    return DataLoader(loader.dataset, batch_sampler=sampler, collate_fn=loader.collate_fn,
                      **_options(loader, persistent_workers=loader.persistent_workers))


def _options(loader, persistent_workers):
    # The train loader's sampler never ends, so persistent workers would gain nothing, and OneFlow would
    # start them (and send them indices) when the loader is built, before a resume restores its position.
    options = dict(num_workers=loader.num_workers, pin_memory=loader.pin_memory, timeout=loader.timeout,
                   worker_init_fn=loader.worker_init_fn, multiprocessing_context=loader.multiprocessing_context,
                   generator=loader.generator, persistent_workers=persistent_workers and loader.num_workers > 0)
    if loader.num_workers > 0:  # OneFlow refuses the option without workers
        options["prefetch_factor"] = loader.prefetch_factor
    return options


def _stop_workers(loader):
    # LiBai main asks for persistent workers, which OneFlow starts with the loader: they would
    # idle (holding prefetched stock batches) for the whole run.
    iterator = getattr(loader, "_iterator", None)
    if iterator is not None and hasattr(iterator, "_shutdown_workers"):
        iterator._shutdown_workers()
