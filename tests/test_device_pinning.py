"""Tests that mean CPU ranks get CPU ranks on every host, a GPU host included.

``launch`` hides the GPUs from the ranks unless asked for them.  On this CPU-only host OneFlow
sees no device either way; on a GPU host the same assertions prove that the pin works there
(``device_count() == 0`` with GPUs in the machine).
"""
import os

import pytest

from conftest import rank_script
from libai_ext.testing import launch, pin_to_device, ranks_device


def test_cpu_ranks_see_no_gpu(tmp_path):
    result = launch(rank_script("report_device.py"), 2, timeout=180, workdir=str(tmp_path),
                    env=dict(os.environ, CUDA_VISIBLE_DEVICES="0,1"), device="cpu")
    records = [result.record(rank) for rank in range(2)]
    assert len(records) == 2
    for record in records:
        assert record == {"cuda_visible_devices": "", "device_count": 0, "cuda_available": False}


def test_cuda_ranks_keep_the_callers_devices(tmp_path):
    result = launch(rank_script("report_device.py"), 1, timeout=180, workdir=str(tmp_path),
                    env=dict(os.environ, CUDA_VISIBLE_DEVICES="0"), device="cuda")
    assert result.record(0, "cuda_visible_devices") == "0"


def test_device_choice_comes_from_the_environment():
    assert ranks_device({}) == "cpu"
    assert ranks_device({"LIBAI_EXT_TEST_DEVICE": "cuda"}) == "cuda"
    with pytest.raises(ValueError, match="LIBAI_EXT_TEST_DEVICE='gpu'"):
        ranks_device({"LIBAI_EXT_TEST_DEVICE": "gpu"})
    assert pin_to_device({"CUDA_VISIBLE_DEVICES": "3"}, "cpu")["CUDA_VISIBLE_DEVICES"] == ""
    assert pin_to_device({"CUDA_VISIBLE_DEVICES": "3"}, "cuda")["CUDA_VISIBLE_DEVICES"] == "3"


def test_the_pytest_process_itself_is_pinned():
    """In-process tests create OneFlow tensors too: conftest hides the GPUs before oneflow loads."""
    if ranks_device() != "cpu":
        pytest.skip("LIBAI_EXT_TEST_DEVICE=cuda: this session keeps its GPUs visible on purpose")
    import oneflow as flow

    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""
    assert flow.cuda.device_count() == 0
