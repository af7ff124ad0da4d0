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
    libai_ext.apply_patches()
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


def swap(x, y):
    return x + 1, y


@pytest.fixture
def local_mixup():
    """The argument-passing tests use ``swap``, not a flowvision Mixup: the "fast" mode's local mixup
    takes any callable (the default mode refuses it, tests/test_global_mixup.py)."""
    from libai_ext.random import modes

    saved = modes.layer_seed(), modes.randomness()
    modes.set_layer_seed(0, "fast")
    yield
    modes.set_layer_seed(*saved)


def labelled():
    return Instance(images=DistTensorData(flow.zeros(2, 3), placement_idx=0),
                    labels=DistTensorData(flow.zeros(2), placement_idx=-1))


def test_get_batch_takes_the_installed_lines_calling_convention(local_mixup):
    from libai_ext.compat import libai_line, libai_main

    if libai_line() is libai_main:
        out = ConsistentBatchTrainer.get_batch(labelled(), "cpu", swap)  # trainers: (data, device, mixup)
        assert out["images"].to_local().numpy().min() == 1.0
        out = ConsistentBatchTrainer.get_batch(labelled(), "cpu")  # evaluator: (data, device)
        assert out["images"].placement.type == "cpu"
        out = ConsistentBatchTrainer.get_batch(labelled(), "cuda")  # main's default on a host without CUDA
        assert out["images"].placement.type == ("cuda" if flow.cuda.is_available() else "cpu")
    else:
        out = ConsistentBatchTrainer.get_batch(labelled(), swap)  # trainers: (data, mixup)
        assert out["images"].to_local().numpy().min() == 1.0
        with pytest.raises(TypeError, match="positional arguments but 4 were given"):
            ConsistentBatchTrainer.get_batch(labelled(), "cpu", swap)
    out = ConsistentBatchTrainer.get_batch(labelled(), mixup_func=swap)
    assert out["images"].to_local().numpy().min() == 1.0


def test_batch_guard_passes_the_installed_convention_through(local_mixup):
    """The guard's wrapper hands get_batch the same arguments the trainer gave it (one rank)."""
    from libai_ext.compat.get_batch_api import call_get_batch
    from libai_ext.engine.batch_check import install_batch_check

    trainer = object.__new__(ConsistentBatchTrainer)  # no loaders or model needed for get_batch
    trainer.iter = 0
    install_batch_check(trainer, "every")
    out = call_get_batch(trainer.get_batch, labelled(), swap)
    assert out["images"].to_local().numpy().min() == 1.0
    assert trainer.get_batch.checked
