"""Random state saved with checkpoints and around evaluation: python, numpy and every OneFlow generator.

On this CPU host OneFlow has one generator (``cpu``).  The CUDA branch (one generator per
device, reached through ``flow._oneflow_internal.default_generator("cuda:<i>")``) is
exercised with the device count and the getter simulated: calling the real getter without
a device aborts the process.
"""
import logging
import pickle
import random

import numpy as np
import oneflow as flow
import pytest

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


@pytest.fixture
def two_cuda_devices(monkeypatch):
    simulated = {}

    def default_generator(device):
        if not device.startswith("cuda:"):
            raise AssertionError(f"unexpected generator request {device!r}")
        return simulated.setdefault(device, SimulatedGenerator(device))

    monkeypatch.setattr(rng_state, "cuda_device_count", lambda: 2)
    monkeypatch.setattr(flow._oneflow_internal, "default_generator", default_generator)
    return simulated


def test_cpu_host_has_only_the_cpu_generator():
    assert rng_state.cuda_device_count() == 0
    assert list(rng_state.oneflow_generators()) == ["cpu"]


def test_cuda_host_saves_and_restores_every_device_generator(two_cuda_devices):
    generators = rng_state.oneflow_generators()
    assert list(generators) == ["cpu", "cuda:0", "cuda:1"]
    assert generators["cpu"] is flow.default_generator
    flow.manual_seed(4)
    state = rng_state.capture_rng_state()
    assert sorted(state["oneflow"]) == ["cpu", "cuda:0", "cuda:1"]
    saved = {name: two_cuda_devices[name].state.copy() for name in ("cuda:0", "cuda:1")}
    for generator in two_cuda_devices.values():
        generator.draw()
    rng_state.restore_rng_state(state)
    for name in ("cuda:0", "cuda:1"):
        np.testing.assert_array_equal(two_cuda_devices[name].state, saved[name])


def test_cuda_draws_are_preserved_around_evaluation(two_cuda_devices):
    rng_state.oneflow_generators()  # the devices' generators exist, as after training steps
    before = {name: g.state.copy() for name, g in two_cuda_devices.items()}
    assert len(before) == 2
    with rng_state.preserved_rng_state():
        for generator in two_cuda_devices.values():
            generator.draw()
    for name, state in before.items():
        np.testing.assert_array_equal(two_cuda_devices[name].state, state)


def test_old_file_on_a_cuda_host_restores_cpu_and_names_what_it_cannot(two_cuda_devices, caplog):
    flow.manual_seed(5)
    old = flow.get_rng_state().numpy()
    with caplog.at_level(logging.WARNING, logger=rng_state.__name__):
        restored = rng_state.restore_oneflow_state(old)
    assert restored == ["cpu"]
    assert "cuda:0: not in the saved state" in caplog.text and "cuda:1: not in the saved state" in caplog.text


def test_state_saved_on_a_cuda_host_restores_on_a_cpu_host_with_a_warning(caplog):
    flow.manual_seed(6)
    saved = {"cpu": flow.get_rng_state().numpy(), "cuda:0": np.zeros(16, dtype=np.uint8)}
    first = flow.rand(4).numpy().tolist()
    with caplog.at_level(logging.WARNING, logger=rng_state.__name__):
        assert rng_state.restore_oneflow_state(saved) == ["cpu"]
    assert flow.rand(4).numpy().tolist() == first
    assert "cuda:0: saved, but this process has no such device" in caplog.text
