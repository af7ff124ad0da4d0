"""Record which CUDA devices a process touches and which generators it creates, on any host.

``DeviceCalls.install(simulated_gpus=8)`` makes this process look like a rank of an 8-GPU host
and records, instead of running, every OneFlow call that would reach a GPU's generator:
``create_generator`` (what ``flow.Generator`` calls), ``default_generator("cuda:<i>")``,
``manual_seed(seed, "cuda", i)`` (``flow.cuda.manual_seed``) and ``ManualSeedAllCudaGenerator``
(``flow.cuda.manual_seed_all``).  A simulated CUDA generator keeps a state that its seed sets,
so code that reads, re-seeds and restores one behaves as on a GPU.  ``flow.cuda.current_device()``
stays OneFlow's own (the rank's ``LOCAL_RANK``).  ``install()`` without ``simulated_gpus``
records the same calls and runs them for real (a real GPU host: ``make gpu-check``).

Counts: ``created`` (generators per device) and ``devices`` (every CUDA index touched).
"""
import collections
import hashlib

import numpy as np


class SimulatedCudaGenerator:
    """A CUDA generator of a host that has none: seeding and state round-trip, no device."""

    def __init__(self, index):
        self.device_index = index
        self._state = np.zeros(16, dtype=np.uint8)

    def manual_seed(self, seed):
        self._state = np.frombuffer(hashlib.blake2b(str(int(seed)).encode(), digest_size=16).digest(),
                                    dtype=np.uint8).copy()
        return self

    def get_state(self):
        import oneflow as flow

        return flow.tensor(self._state.copy(), dtype=flow.uint8)

    def set_state(self, tensor):
        self._state = tensor.numpy().astype(np.uint8).copy()

    def draw(self):
        """What a random kernel does to the generator (for tests of code that must notice a draw)."""
        self._state = (self._state + 1).astype(np.uint8)


class DeviceCalls:
    def __init__(self):
        self.created = collections.Counter()  # generators created, by device name
        self.devices = set()  # CUDA device indices touched
        self.simulated = {}  # index -> SimulatedCudaGenerator
        self._restore = []

    def install(self, simulated_gpus=None):
        import oneflow as flow

        internal = flow._oneflow_internal
        real = {name: getattr(internal, name) for name in
                ("create_generator", "default_generator", "manual_seed", "ManualSeedAllCudaGenerator")}
        simulate = simulated_gpus is not None

        def cuda_index(device):
            text = str(device)
            return int(text.split(":", 1)[1]) if ":" in text else flow.cuda.current_device()

        def create_generator(device="auto"):
            self.created[str(device)] += 1
            if str(device).startswith("cuda"):
                self.devices.add(cuda_index(device))
                if simulate:
                    return SimulatedCudaGenerator(cuda_index(device))
            return real["create_generator"](device)

        def default_generator(device):
            if str(device).startswith("cuda"):
                index = cuda_index(device)
                self.devices.add(index)
                if simulate:
                    return self.simulated.setdefault(index, SimulatedCudaGenerator(index))
            return real["default_generator"](device)

        def manual_seed(seed, *device):
            if device and str(device[0]).startswith("cuda"):
                index = device[1] if len(device) > 1 and device[1] is not None and device[1] >= 0 else \
                    flow.cuda.current_device()
                self.devices.add(index)
                if simulate:
                    return default_generator(f"cuda:{index}").manual_seed(seed)
            return real["manual_seed"](seed, *device)

        def manual_seed_all_cuda(seed):
            count = simulated_gpus if simulate else flow.cuda.device_count()
            self.devices.update(range(count))
            if simulate:
                for index in range(count):
                    default_generator(f"cuda:{index}").manual_seed(seed)
                return None
            return real["ManualSeedAllCudaGenerator"](seed)

        replacements = {"create_generator": create_generator, "default_generator": default_generator,
                        "manual_seed": manual_seed, "ManualSeedAllCudaGenerator": manual_seed_all_cuda}
        for name, function in replacements.items():
            self._replace(internal, name, function)
        if simulate:
            self._replace(flow.cuda, "device_count", lambda: simulated_gpus)
            self._replace(flow.cuda, "is_available", lambda: True)
        return self

    def _replace(self, owner, name, value):
        self._restore.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    def uninstall(self):
        while self._restore:
            owner, name, value = self._restore.pop()
            setattr(owner, name, value)

    def snapshot(self):
        """``{"created": {device: n}, "devices": [i, ...]}``, and start counting afresh."""
        counts = {"created": dict(self.created), "devices": sorted(self.devices)}
        self.created.clear()
        self.devices.clear()
        return counts
