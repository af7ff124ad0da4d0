"""The train loader of ``train.randomness="layout_invariant"``: global order, keyed augmentation.

LiBai builds its train loader with a ``CyclicSampler`` (bucketed per data-parallel rank) when
the config passes no sampler of its own.  ``use_global_order`` then rebuilds that loader around
the same dataset with ``GlobalOrderBatchSampler`` (the global batch of step ``t`` is the same
samples on any data-parallel size) and ``KeyedAugmentation`` (each sample augmented from
(seed, epoch, index), not from whichever rank's stream reads it).  Everything else of the stock
loader is kept: its position (``consumed_samples``), seed, data-parallel shard, workers, collate
function and ``mixup_func``.  A sampler the config passes itself is left alone, as is the
"fast" mode (LiBai's sampler, each rank's own streams).
"""
import logging

from libai.config import try_get_key
from libai.data.samplers import CyclicSampler
from oneflow.utils.data import DataLoader

from ..data.global_order import GlobalOrderBatchSampler
from ..data.keyed_dataset import KeyedAugmentation
from ..random import DEFAULT_RANDOMNESS, check_randomness

logger = logging.getLogger(__name__)


def wants_global_order(cfg):
    """Layout-invariant randomness and no sampler of the config's own (read before building)."""
    mode = check_randomness(try_get_key(cfg, "train.randomness", default=DEFAULT_RANDOMNESS))
    if mode != "layout_invariant":
        return False
    if try_get_key(cfg, "dataloader.train.sampler", default=None) is not None:
        logger.info("train.randomness=layout_invariant: dataloader.train.sampler is the config's own, kept "
                    "(global batches and augmentation then follow that sampler, not the layout-invariant order)")
        return False
    return True


def use_global_order(loader, consumed_samples=0):
    """``loader`` rebuilt with the global-order sampler and keyed augmentation, starting after
    ``consumed_samples`` global samples (or as is, logged, where it is not a stock LiBai train loader).

    The position is an argument: with workers, LiBai main's loader has already advanced its
    sampler by the batches its persistent workers prefetched.
    """
    stock = getattr(loader, "batch_sampler", None)
    if not isinstance(loader, DataLoader) or type(stock) is not CyclicSampler:
        logger.warning(f"train.randomness=layout_invariant: the train loader ({type(loader).__name__} with "
                       f"{type(stock).__name__}) is not LiBai's CyclicSampler loader; kept as built, so its global "
                       "batches may depend on the data-parallel layout")
        return loader
    sampler = GlobalOrderBatchSampler(
        loader.dataset, stock.micro_batch_size, shuffle=stock.shuffle, consumed_samples=consumed_samples,
        data_parallel_rank=stock.data_parallel_rank, data_parallel_size=stock.data_parallel_size, seed=stock.seed)
    _stop_workers(loader)
    # Each item of the sampler is a whole batch (KeyedAugmentation keys it as one): batch_size=None.
    rebuilt = DataLoader(KeyedAugmentation(loader.dataset, stock.seed), sampler=sampler, batch_size=None,
                         **_options(loader))
    rebuilt.mixup_func = getattr(loader, "mixup_func", None)
    logger.info(f"train.randomness=layout_invariant: train samples in one global order per (seed, epoch) "
                f"(data-parallel shard {sampler.data_parallel_rank} of {sampler.data_parallel_size}, "
                f"from sample {sampler.consumed_samples}), augmentation keyed by (seed, epoch, index); "
                f"LiBai's CyclicSampler replaced")
    return rebuilt


def _options(loader):
    options = dict(num_workers=loader.num_workers, collate_fn=loader.collate_fn, pin_memory=loader.pin_memory,
                   timeout=loader.timeout, worker_init_fn=loader.worker_init_fn,
                   multiprocessing_context=loader.multiprocessing_context, generator=loader.generator,
                   persistent_workers=loader.persistent_workers)
    if loader.num_workers > 0:  # OneFlow refuses the option without workers
        options["prefetch_factor"] = loader.prefetch_factor
    return options


def _stop_workers(loader):
    # LiBai main asks for persistent workers, which OneFlow starts with the loader: they would
    # idle (holding prefetched stock batches) for the whole run.
    iterator = getattr(loader, "_iterator", None)
    if iterator is not None and hasattr(iterator, "_shutdown_workers"):
        iterator._shutdown_workers()
