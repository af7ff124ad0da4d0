"""``ConsistentBatchTrainer``: LiBai's ``DefaultTrainer`` with correctly paired batches."""
import contextlib

import oneflow as flow
from libai.engine import DefaultTrainer
from libai.utils import distributed as dist

from .batch import consistent_batch


def placement_data_parallel_rank():
    """This rank's index along the data-parallel axis of its stage's placement.

    LiBai lays stage ``s`` over ranks ``[s*n, (s+1)*n)`` (``n = dp * tp``) as a
    ``(dp, tp)`` grid, so a rank's shard of an ``S(0)`` batch is ``(rank % n) // tp``.
    LiBai 0.1.1's ``get_data_parallel_rank()`` returns ``rank // (tp * pp)`` instead,
    which under pipeline parallelism makes two shards of stage 0 read the same samples.
    """
    util = dist.get_dist_util()
    per_stage = util.world_size // util.pipeline_parallel_size
    return (flow.env.get_rank() % per_stage) // util.tensor_parallel_size


@contextlib.contextmanager
def samplers_follow_placement():
    """While building data loaders, give samplers the data-parallel rank of the placement."""
    original = dist.get_data_parallel_rank
    dist.get_data_parallel_rank = placement_data_parallel_rank
    try:
        yield
    finally:
        dist.get_data_parallel_rank = original


class ConsistentBatchTrainer(DefaultTrainer):
    """A ``DefaultTrainer`` whose batches are built on pipeline stage 0 only.

    Every ``DistTensorData`` field becomes global on stage 0 first and then moves to
    the stage of its ``placement_idx``, so images and (mixed-up, soft) labels always
    come from the same augmentation.  Data loaders give each sampler the shard that
    its rank holds in the stage-0 placement.  Use it by setting
    ``train.trainer = "libai_ext.ConsistentBatchTrainer"`` (see ``tools/train_net.py``).
    """

    @classmethod
    def get_batch(cls, data, mixup_func=None):
        return consistent_batch(data, mixup_func)

    @classmethod
    def build_train_loader(cls, cfg, tokenizer=None):
        with samplers_follow_placement():
            return super().build_train_loader(cfg, tokenizer)

    @classmethod
    def build_test_loader(cls, cfg, tokenizer=None):
        with samplers_follow_placement():
            return super().build_test_loader(cfg, tokenizer)
