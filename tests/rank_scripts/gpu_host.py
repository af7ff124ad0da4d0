"""On every rank: libai_ext's seeding, random state, keyed augmentation and "fast" dropout, with every
OneFlow generator creation and CUDA device call recorded (``rank_scripts/device_calls.py``).

``--simulated-gpus N``: the rank runs on CPU in a simulated N-GPU host (no GPU needed; CUDA
dropout kernels cannot run there, so the CUDA dropouts go as far as their generator).
Without it: a real GPU host, every call made for real.  One record per phase, then a summary.
"""
import argparse
import types

import oneflow as flow

from common import run_or_die
from device_calls import DeviceCalls
from libai_ext import Dropout, seed_everything
from libai_ext.random import capture_rng_state, preserved_rng_state, restore_rng_state
from libai_ext.random import modes
from libai_ext.random.devices import own_cuda_device, own_cuda_generator
from libai_ext.random.keyed_dataset import KeyedDrawOnGPU, preserved_streams, seed_streams
from libai_ext.random.shard_rng import local_device, shard_generator
from libai_ext.testing import write_rank_result

LAYERS, STEPS = 3, 5


def fast_dropouts(calls, layers, simulated):
    cpu = flow.ones(8, 16)
    for _ in range(STEPS):
        for layer in layers:
            layer(cpu)
    if simulated:  # the CUDA path of a layer on a global tensor, up to the kernel this host cannot run
        global_cuda_part = types.SimpleNamespace(is_global=True, placement=types.SimpleNamespace(type="cuda"))
        for step in range(STEPS):
            for layer in layers:
                shard_generator(local_device(global_cuda_part), modes.layer_seed(), layer.stream, step, ())
    else:
        device = flow.ones(8, 16, device=f"cuda:{own_cuda_device()}")
        for _ in range(STEPS):
            for layer in layers:
                layer(device)
        flow._oneflow_internal.eager.Sync()
    return calls.snapshot()


def gpu_draw_inside_keyed_augmentation(simulated):
    """A dataset drawing on this rank's GPU inside keyed augmentation: refused?"""
    try:
        with preserved_streams():
            seed_streams(1234, 0, 0)
            if simulated:
                own_cuda_generator().draw()
            else:
                flow.rand(4, device=f"cuda:{own_cuda_device()}")
    except KeyedDrawOnGPU as e:
        return str(e)
    return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--simulated-gpus", type=int, default=None)
    args = parser.parse_args()
    simulated = args.simulated_gpus is not None
    # Built before the simulation: LiBai would place their counters on GPUs this host does not have.
    layers = [Dropout(0.5, randomness="fast").train() for _ in range(LAYERS)]
    calls = DeviceCalls().install(simulated_gpus=args.simulated_gpus)
    phases = {}
    seed_everything(1234, randomness="fast")
    phases["seeding"] = calls.snapshot()
    restore_rng_state(capture_rng_state())
    with preserved_rng_state():
        pass
    phases["rng_state"] = calls.snapshot()
    with preserved_streams():
        for index in range(4):
            seed_streams(1234, 0, index)
    phases["keyed_streams"] = calls.snapshot()
    refusal = gpu_draw_inside_keyed_augmentation(simulated)
    calls.snapshot()
    phases["fast_dropout"] = fast_dropouts(calls, layers, simulated)
    flow.cuda.manual_seed_all(1)  # what libai_ext 0.1 seeded: proof that the recording sees every GPU
    phases["manual_seed_all"] = calls.snapshot()
    gpus = flow.cuda.device_count()
    calls.uninstall()
    write_rank_result(own_device=own_cuda_device() if not simulated else flow.cuda.current_device(),
                      gpus=gpus, phases=phases, dropout_calls=2 * LAYERS * STEPS, streams=LAYERS,
                      keyed_gpu_refusal=refusal)


if __name__ == "__main__":
    run_or_die(main)
