"""A rank of an 8-GPU host: one generator per (device, stream), and only its own GPU touched.

Run on this CPU host by recording OneFlow's generator constructor and every call that reaches a
GPU's generator (``rank_scripts/device_calls.py``) in a simulated 8-GPU host, on 2 real ranks
(``LOCAL_RANK`` 0 and 1, as OneFlow's launcher sets them).  Counted per rank: the generators
created, by device, and the CUDA devices touched by seeding, random-state capture and restore,
keyed augmentation and "fast" dropout.  ``flow.cuda.manual_seed_all`` (what libai_ext 0.1 seeded
with) is recorded too: the recording sees a call that reaches all 8 devices.

In one process: "fast" masks from reused generators equal those of a fresh generator per call
(the previous implementation), bit for bit, also with many calls queued asynchronously.
"""
import numpy as np
import oneflow as flow
import pytest

from conftest import rank_script, records_of_every_rank
from libai_ext.random.layers import Dropout
from libai_ext.random import modes, shard_rng
from libai_ext.testing import launch

GPUS = 8
NPROC = 2


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("gpu_host")
    result = launch(rank_script("gpu_host.py"), NPROC, ["--simulated-gpus", GPUS], timeout=240, workdir=str(workdir))
    return {rank: records[-1] for rank, records in records_of_every_rank(result, count=1).items()}


def test_each_rank_seeds_saves_and_restores_only_its_own_gpu(ranks):
    for rank, record in ranks.items():
        assert record["own_device"] == rank  # LOCAL_RANK: one host
        for phase in ("seeding", "rng_state", "keyed_streams", "fast_dropout"):
            assert record["phases"][phase]["devices"] == [rank], (rank, phase, record["phases"][phase])


def test_the_recording_sees_a_call_that_reaches_every_gpu(ranks):
    for record in ranks.values():
        assert record["gpus"] == GPUS
        assert record["phases"]["manual_seed_all"]["devices"] == list(range(GPUS))


def test_fast_dropout_creates_one_generator_per_device_and_stream(ranks):
    for rank, record in ranks.items():
        created = record["phases"]["fast_dropout"]["created"]
        assert record["dropout_calls"] == 30 and record["streams"] == 3
        assert created == {"cpu": 3, f"cuda:{rank}": 3}, created
        for phase in ("seeding", "rng_state", "keyed_streams"):
            assert record["phases"][phase]["created"] == {}


def test_keyed_augmentation_refuses_a_draw_on_the_gpu(ranks):
    for rank, record in ranks.items():
        assert record["keyed_gpu_refusal"].startswith(f"the dataset drew random numbers on cuda:{rank} during keyed")


# --- in one process ------------------------------------------------------------------------

def fast_masks(x, calls, fresh_generators):
    """``calls`` masks of one "fast" Dropout stream; with ``fresh_generators``, a new generator for
    every call (the previous implementation), each mask read before the next call is made."""
    layer = Dropout(0.3, randomness="fast").train()
    layer.stream = "reuse-check"
    masks = []
    for _ in range(calls):
        if fresh_generators:
            shard_rng._generators.clear()
        masks.append(layer(x))
        if fresh_generators:
            masks[-1] = masks[-1].numpy()
    return [mask if isinstance(mask, np.ndarray) else mask.numpy() for mask in masks]


def test_reused_generators_draw_the_masks_of_fresh_ones_even_with_calls_queued(monkeypatch):
    monkeypatch.setattr(shard_rng, "_generators", {})
    modes.set_layer_seed(1234, "fast")
    x = flow.ones(600, 700)
    # Reused: the calls are queued back to back, OneFlow runs them while the next call re-seeds.
    reused = fast_masks(x, 6, fresh_generators=False)
    fresh = fast_masks(x, 6, fresh_generators=True)
    assert all(np.array_equal(a, b) for a, b in zip(reused, fresh))
    assert len({mask.tobytes() for mask in reused}) == 6


def test_one_generator_per_device_and_stream(monkeypatch):
    created = []
    real = flow._oneflow_internal.create_generator
    monkeypatch.setattr(flow._oneflow_internal, "create_generator",
                        lambda device="auto": created.append(device) or real(device))
    monkeypatch.setattr(shard_rng, "_generators", {})
    modes.set_layer_seed(7, "fast")
    layers = [Dropout(0.5, randomness="fast").train() for _ in range(4)]
    for _ in range(5):
        for layer in layers:
            layer(flow.ones(3, 5))
    assert created == ["cpu"] * 4


def test_local_device_of_a_tensor():
    assert shard_rng.local_device(flow.ones(2)) == "cpu"
    assert shard_rng.local_device(flow.ones(2).to_global(placement=flow.placement("cpu", [0]),
                                                         sbp=flow.sbp.broadcast)) == "cpu"
