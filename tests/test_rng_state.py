"""Random state saved with checkpoints and around evaluation: python, numpy and every OneFlow generator.

On this CPU host OneFlow has one generator (``cpu``).  The CUDA branch (the generator of this
rank's own device, reached through ``flow._oneflow_internal.default_generator("cuda:<i>")``)
is exercised with the device count, the rank's device and the getter simulated: calling the
real getter without a device aborts the process.
"""
import logging
import pickle
import random

import numpy as np
import oneflow as flow
import pytest

from libai_ext.checkpoint import rng_state as saved_rng_state
from libai_ext.random import rng_state


def draws():
    return (random.random(), float(np.random.rand()), flow.rand(8).numpy().tolist())


def test_restore_repeats_python_numpy_and_oneflow_draws():
    # Captured right after seeding: OneFlow 0.9.0 restores its CPU generator exactly only
    # from a block boundary (see rng_state's docstring).
    random.seed(1), np.random.seed(1), flow.manual_seed(1)
    state = rng_state.capture_rng_state()
    assert sorted(state["oneflow"]) == ["cpu"]
    first = draws()
    rng_state.restore_rng_state(state)
    assert draws() == first


def test_preserved_rng_state_leaves_the_streams_where_they_were():
    random.seed(2), np.random.seed(2), flow.manual_seed(2)
    with rng_state.preserved_rng_state():
        inside = draws()
    assert draws() == inside


def test_old_checkpoint_files_still_restore(tmp_path):
    """libai_ext 0.1.0 saved ``flow.get_rng_state().numpy()`` as a bare array under "oneflow"."""
    random.seed(3), np.random.seed(3), flow.manual_seed(3)
    path = tmp_path / "rank_0.pkl"
    path.write_bytes(pickle.dumps({"python": random.getstate(), "numpy": np.random.get_state(),
                                   "oneflow": flow.get_rng_state().numpy()}))
    first = draws()
    rng_state.restore_rng_state(pickle.loads(path.read_bytes()))
    assert draws() == first


class SimulatedGenerator:
    """Stands in for a CUDA device's generator: a state that draws advance."""

    def __init__(self, device):
        self.device = device
        self.state = np.frombuffer(device.encode().ljust(16, b"\0"), dtype=np.uint8).copy()

    def get_state(self):
        return flow.tensor(self.state)

    def set_state(self, tensor):
        self.state = tensor.numpy().copy()

    def draw(self):
        self.state = (self.state + 1).astype(np.uint8)


OWN_DEVICE = 1  # this process plays the rank of LOCAL_RANK 1 on a host with 4 GPUs


@pytest.fixture
def four_cuda_devices(monkeypatch):
    """A 4-GPU host seen from the rank whose device is cuda:1; every generator asked for is recorded."""
    simulated = {}

    def default_generator(device):
        if not device.startswith("cuda:"):
            raise AssertionError(f"unexpected generator request {device!r}")
        return simulated.setdefault(device, SimulatedGenerator(device))

    monkeypatch.setattr(flow.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(flow.cuda, "current_device", lambda: OWN_DEVICE)
    monkeypatch.setattr(flow._oneflow_internal, "default_generator", default_generator)
    return simulated


def test_cpu_host_has_only_the_cpu_generator():
    assert rng_state.cuda_device_count() == 0
    assert list(rng_state.oneflow_generators()) == ["cpu"]


def test_cuda_host_saves_and_restores_this_ranks_device_only(four_cuda_devices):
    generators = rng_state.oneflow_generators()
    assert list(generators) == ["cpu", "cuda"]
    assert generators["cpu"] is flow.default_generator
    flow.manual_seed(4)
    state = rng_state.capture_rng_state()
    assert sorted(state["oneflow"]) == ["cpu", "cuda"]
    own = four_cuda_devices[f"cuda:{OWN_DEVICE}"]
    saved = own.state.copy()
    own.draw()
    rng_state.restore_rng_state(state)
    np.testing.assert_array_equal(own.state, saved)
    assert sorted(four_cuda_devices) == [f"cuda:{OWN_DEVICE}"], "another rank's GPU was touched"


def test_cuda_draws_are_preserved_around_evaluation(four_cuda_devices):
    rng_state.oneflow_generators()  # this rank's device generator exists, as after training steps
    own = four_cuda_devices[f"cuda:{OWN_DEVICE}"]
    before = own.state.copy()
    with rng_state.preserved_rng_state():
        own.draw()
    np.testing.assert_array_equal(own.state, before)
    assert sorted(four_cuda_devices) == [f"cuda:{OWN_DEVICE}"]


def test_every_device_file_of_libai_ext_0_1_restores_this_ranks_device(four_cuda_devices):
    """libai_ext 0.1 saved every visible device under "cuda:<i>": the own device's entry is the one."""
    flow.manual_seed(7)
    saved = {"cpu": flow.get_rng_state().numpy()}
    saved.update({f"cuda:{i}": np.full(16, i, dtype=np.uint8) for i in range(4)})
    assert rng_state.restore_oneflow_state(saved) == ["cpu", "cuda"]
    np.testing.assert_array_equal(four_cuda_devices[f"cuda:{OWN_DEVICE}"].state, np.full(16, OWN_DEVICE))
    assert sorted(four_cuda_devices) == [f"cuda:{OWN_DEVICE}"]


def test_old_file_on_a_cuda_host_restores_cpu_and_names_what_it_cannot(four_cuda_devices, caplog):
    flow.manual_seed(5)
    old = flow.get_rng_state().numpy()
    with caplog.at_level(logging.WARNING, logger=rng_state.__name__):
        restored = rng_state.restore_oneflow_state(old)
    assert restored == ["cpu"]
    assert "cuda: not in the saved state" in caplog.text


def test_state_saved_on_a_cuda_host_restores_on_a_cpu_host_with_a_warning(caplog):
    flow.manual_seed(6)
    saved = {"cpu": flow.get_rng_state().numpy(), "cuda": np.zeros(16, dtype=np.uint8)}
    first = flow.rand(4).numpy().tolist()
    with caplog.at_level(logging.WARNING, logger=rng_state.__name__):
        assert rng_state.restore_oneflow_state(saved) == ["cpu"]
    assert flow.rand(4).numpy().tolist() == first
    assert "cuda: saved, but this process has no such device" in caplog.text


def test_a_truncated_random_state_file_is_named(tmp_path):
    path = tmp_path / "model_0000004" / "libai_ext" / "rng_state" / "rank_1.pkl"
    path.parent.mkdir(parents=True)
    path.write_bytes(pickle.dumps({"python": random.getstate()})[:40])
    with pytest.raises(ValueError, match=r"the random state .*model_0000004/libai_ext/rng_state/rank_1\.pkl "
                                         r"cannot be read"):
        saved_rng_state._read(str(path))
