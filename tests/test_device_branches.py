"""Each device-dependent decision of libai_ext, taken on this CPU host for a CUDA placement or tensor.

A CUDA placement object can be built without a GPU; a CUDA tensor cannot, so where a tensor
would be created the test checks the device it is asked for.
"""
import oneflow as flow
import pytest
from libai.data.structures import DistTensorData, Instance

from libai_ext.engine import batch, graph


def test_graph_device_follows_the_placement_not_the_host(monkeypatch):
    assert graph.placement_is_cuda(flow.placement("cuda", [0]))
    assert not graph.placement_is_cuda(flow.placement("cpu", [0]))
    monkeypatch.setattr(graph.dist, "get_layer_placement", lambda idx: flow.placement("cuda", [0, 1]))
    assert graph.placement_is_cuda()


def test_cpu_only_graph_refusals_are_lifted_for_cuda_placements():
    options = dict(fp16=True, data_parallel_size=2, tensor_parallel_size=2)
    with pytest.raises(graph.GraphConfigError):
        graph.check_graph_options(cuda=graph.placement_is_cuda(flow.placement("cpu", [0])), **options)
    graph.check_graph_options(cuda=graph.placement_is_cuda(flow.placement("cuda", [0])), **options)


def test_layout_records_the_device_of_stage0s_tensor():
    field = DistTensorData(flow.zeros(4, 3, dtype=flow.float32), placement_idx=0)
    loader = batch.Stage0OnlyLoader.__new__(batch.Stage0OnlyLoader)  # stage 0's, its first batch's layout known
    loader.reads_data, loader.loader = True, [Instance(images=field)]
    loader.layout = {"images": {"shape": [4, 3], "dtype": "oneflow.float32", "device": "cpu",
                                "sbp_list": list(field.sbp_list), "placement_idx": 0}}
    assert len(list(loader)) == 1
    loader.layout["images"]["device"] = "cuda"
    with pytest.raises(ValueError, match="fixed batch shapes"):
        list(loader)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_placeholders_are_made_on_the_recorded_device(monkeypatch, device):
    requested = []

    def zeros(shape, dtype=None, device=None):
        requested.append((list(shape), dtype, device))
        return "placeholder"

    monkeypatch.setattr(batch.flow, "zeros", zeros)
    spec = {"shape": [2, 5], "dtype": "oneflow.int64", "device": device, "sbp_list": ["split_0", "broadcast"],
            "placement_idx": -1}
    assert batch.placeholder(spec) == "placeholder"
    assert requested == [([2, 5], flow.int64, device)]


def test_cpu_placeholder_is_a_real_cpu_tensor():
    spec = {"shape": [2, 5], "dtype": "oneflow.float32", "device": "cpu"}
    tensor = batch.placeholder(spec)
    assert tensor.device.type == "cpu" and tuple(tensor.shape) == (2, 5) and tensor.dtype == flow.float32
