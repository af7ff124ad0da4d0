"""Batch consistency guard: catch rank-dependent batches before they reach the model (docs/usage.md).

``train.batch_check = "off" | "first" | "every"`` wraps the trainer's ``get_batch`` (stock ``DefaultTrainer`` too): it
applies mixup as LiBai does, checksums each field's local tensor on every rank, all-gathers the small table and
compares it within every set of ranks whose local data become one global batch. Every rank sees the same table, so
on a disagreement all raise the same ``BatchMismatchError`` together (none hangs).

Which ranks must agree: under stock LiBai 0.1.1, all ranks of a data-parallel group, as each field keeps its own
stage's data. Under ``ConsistentBatchTrainer`` and stock LiBai main (``get_batch`` through stage 0 since LiBai #255)
every field comes from one stage-0 rank per group, so the guard checks that different data-parallel groups do not hold
identical batches (a sampler ignoring the data-parallel rank, as 0.1.1's under dp x pp). Under stage-0-only loading
(the default under pipeline parallelism) only stage 0 holds data: nothing to compare, the batches pass.
"""
import logging

import numpy as np
import oneflow as flow
from libai.data.structures import DistTensorData, Instance
from libai.utils import distributed as dist

from ..compat import get_batch_api, libai_line
from ..compat.layout import layout_coordinates
from ..random.global_mixup import split_mixup
from .batch import apply_mixup, check_fields, reraise_worker_error, stage0_only_loading
from .trainer import ConsistentBatchTrainer

BATCH_CHECK_MODES = ("off", "first", "every")
_CHECKSUMS = 4  # numel, sum, sum of squares, position-weighted sum
logger = logging.getLogger(__name__)


class BatchMismatchError(RuntimeError):
    pass


def field_checksum(tensor):
    """Four floats summarising ``tensor``, computed on the tensor's own device."""
    values = tensor.to(flow.float64).flatten()
    weights = flow.arange(values.shape[0], dtype=flow.float64, device=values.device) % 1009 + 1
    return [float(values.shape[0]), values.sum().item(), (values * values).sum().item(),
            (values * weights).sum().item()]


def all_gather_local(tensor):
    """Every rank's local ``tensor`` (same shape on all ranks), stacked on every rank as numpy.

    On CPU placements on every host, deliberately: a few floats per rank, read on the host.
    """
    world = flow.env.all_device_placement("cpu")
    local = tensor.to("cpu").unsqueeze(0)
    gathered = local.to_global(placement=world, sbp=flow.sbp.split(0)).to_global(sbp=flow.sbp.broadcast)
    return gathered.to_local().numpy()


def source_ranks(trainer_cls):
    """{data-parallel index: ranks whose local batches end up in that group's global batch}."""
    groups = {}
    # whether trainer_cls.get_batch takes every field from stage 0
    from_stage0 = issubclass(trainer_cls, ConsistentBatchTrainer) or libai_line().STOCK_BATCH_FROM_STAGE0
    for rank in range(dist.get_world_size()):
        stage, dp_index, tp_index = layout_coordinates(rank)
        if from_stage0 and (stage, tp_index) != (0, 0):
            continue
        groups.setdefault(dp_index, []).append(rank)
    return groups


def _close(a, b):
    return np.allclose(a, b, rtol=1e-9, atol=1e-6)


def find_mismatches(table, names, groups):
    """Problems in the gathered checksum table ``[rank, field, checksum]``, as messages."""
    problems = []
    for f, name in enumerate(names):
        for dp_index, ranks in sorted(groups.items()):
            reference = ranks[0]
            bad = [r for r in ranks[1:] if not _close(table[r, f], table[reference, f])]
            if bad:
                problems.append(f"field {name!r}: ranks {bad} disagree with rank {reference} "
                                f"(data-parallel group {dp_index}, ranks {ranks})")
        firsts = {dp_index: ranks[0] for dp_index, ranks in groups.items()}
        for a in sorted(firsts):
            for b in sorted(firsts):
                if a < b and _close(table[firsts[a], f], table[firsts[b], f]):
                    problems.append(f"field {name!r}: data-parallel groups {a} and {b} hold identical "
                                    f"batches (ranks {firsts[a]} and {firsts[b]}): the sampler ignores "
                                    "the data-parallel rank")
    return problems


def check_batch(data, trainer_cls, iteration):
    """Compare ``data``'s local fields across ranks; raise ``BatchMismatchError`` on every rank."""
    fields = check_fields(data)
    names = sorted(fields)
    row = [x for name in names for x in field_checksum(fields[name].tensor)]
    # `row` holds host-side floats (.item() above): its tensor is a CPU tensor on every host.
    table = all_gather_local(flow.tensor(row, dtype=flow.float64)).reshape(-1, len(names), _CHECKSUMS)
    problems = find_mismatches(table, names, source_ranks(trainer_cls))
    if problems:
        raise BatchMismatchError(
            f"batch check failed at iteration {iteration} ({trainer_cls.__name__}):\n  - "
            + "\n  - ".join(problems) + "\n" + _fixes(problems))


def _fixes(problems):
    fixes = []
    if any("disagree" in p for p in problems):
        fixes.append("Fix: train with train.trainer='libai_ext.ConsistentBatchTrainer' (every field from "
                     "stage 0), or seed every rank identically before building the data pipeline "
                     "(libai_ext.seed_everything, train.seed_scope='global' or 'data_parallel').")
    if any("identical batches" in p for p in problems):
        fixes.append("Fix: give each sampler the data-parallel index of its rank's placement "
                     "(ConsistentBatchTrainer's loaders do; LiBai's get_data_parallel_rank, 0.1.1 and "
                     "main, does not under pipeline parallelism).")
    return "\n".join(fixes)


def mixed_copy(data, mixup_func, device_type=None):
    """``data`` with mixup applied to fresh DistTensorData (the caller's stay untouched)."""
    fields = check_fields(data)
    tensors = apply_mixup({k: v.tensor for k, v in fields.items()}, mixup_func, device_type)
    return Instance(**{k: DistTensorData(tensors[k], sbp_list=v.sbp_list, placement_idx=v.placement_idx)
                       for k, v in fields.items()})


def install_batch_check(trainer, mode):
    """Guard ``trainer``'s training batches; ``mode`` is ``train.batch_check``."""
    if mode not in BATCH_CHECK_MODES:
        raise ValueError(f"train.batch_check={mode!r} is not one of {BATCH_CHECK_MODES}")
    if mode == "off":
        return
    original = trainer.get_batch
    trainer_cls = type(trainer)
    from_stage0 = issubclass(trainer_cls, ConsistentBatchTrainer)
    stage0_only = from_stage0 and hasattr(trainer, "cfg") and stage0_only_loading(trainer.cfg)

    def guarded_get_batch(data, *args, **kwargs):
        # The installed LiBai's calling convention: (data, mixup_func) or (data, device, mixup_func).
        device_type, mixup_func = get_batch_api.split_arguments(args, kwargs)
        reraise_worker_error(data)
        if stage0_only:
            if not guarded_get_batch.checked:
                logger.info("batch check: stage-0-only loading, only stage 0 holds batches: nothing to compare")
                guarded_get_batch.checked = True
            return original(data, *get_batch_api.call_arguments(device_type, mixup_func))
        if mode == "every" or not guarded_get_batch.checked:
            # A global mixup runs after the batch is global: check the local batches it starts from.
            local_mixup = split_mixup(mixup_func)[0] if from_stage0 else mixup_func
            mixed = mixed_copy(data, local_mixup, device_type)
            check_batch(mixed, trainer_cls, trainer.iter)
            if local_mixup is not None:  # (else ``data`` as read: a step's joined micro-batches stay marked)
                data, mixup_func = mixed, None
            guarded_get_batch.checked = True
            logger.info(f"batch check passed at iteration {trainer.iter}")
        return original(data, *get_batch_api.call_arguments(device_type, mixup_func))

    guarded_get_batch.checked = False
    trainer.get_batch = guarded_get_batch  # DefaultTrainer.run_step calls self.get_batch
