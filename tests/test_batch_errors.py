"""ConsistentBatchTrainer.get_batch refuses bad batches with an error naming the field (one rank)."""
import oneflow as flow
import pytest
from libai.data.structures import DistTensorData, Instance
from libai.utils import distributed as dist
from omegaconf import DictConfig

import libai_ext
from libai_ext import ConsistentBatchTrainer


@pytest.fixture(autouse=True)
def two_layers():
    libai_ext.apply_cpu_patches()
    dist.setup_dist_util(DictConfig({"data_parallel_size": 1, "tensor_parallel_size": 1,
                                     "pipeline_parallel_size": 1, "pipeline_num_layers": 2}))


def batch(**fields):
    return Instance(images=DistTensorData(flow.zeros(2, 3), placement_idx=0), **fields)


def test_plain_tensor_field_is_named():
    with pytest.raises(TypeError, match="batch field 'mask' is a Tensor, not a libai DistTensorData"):
        ConsistentBatchTrainer.get_batch(batch(mask=flow.zeros(2)))


@pytest.mark.parametrize("idx", [2, -3])
def test_out_of_range_placement_idx_is_named(idx):
    with pytest.raises(IndexError, match=f"batch field 'labels': placement_idx={idx} is out of range"):
        ConsistentBatchTrainer.get_batch(batch(labels=DistTensorData(flow.zeros(2), placement_idx=idx)))


def test_unknown_sbp_is_named():
    with pytest.raises(ValueError, match="batch field 'labels': sbp 'split_x'"):
        ConsistentBatchTrainer.get_batch(batch(labels=DistTensorData(flow.zeros(2), sbp_list=["split_x", "broadcast"])))


def test_mixup_without_labels_is_named():
    with pytest.raises(KeyError, match="no field 'labels'"):
        ConsistentBatchTrainer.get_batch(batch(), mixup_func=lambda x, y: (x, y))


def test_valid_batch_leaves_the_callers_fields_local():
    data = batch(labels=DistTensorData(flow.zeros(2), placement_idx=-1))
    out = ConsistentBatchTrainer.get_batch(data)
    assert out["labels"].is_global and not data.get("labels").tensor.is_global
