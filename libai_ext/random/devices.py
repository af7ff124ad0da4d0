"""The one CUDA device each rank draws on: its own, never another rank's.

Every rank sees every GPU of its host, and OneFlow places a rank's part of a global tensor on ``LOCAL_RANK``.
Getting a device's generator creates a CUDA context and state memory there, and reading or re-seeding it synchronises
the device: so libai_ext seeds, saves and restores CUDA only here, never by ``flow.cuda.manual_seed_all`` or a loop
over ``device_count()`` (every GPU of a host from each of its ranks).
"""
import oneflow as flow


def cuda_device_count():
    """CUDA devices this process can use (0 on CPU hosts and under ``CUDA_VISIBLE_DEVICES=""``).

    Asked of the devices, not of ``flow.cuda.is_available()``: a CUDA generator getter aborts
    the process (a C++ check, not an exception) where no device exists.
    """
    return flow.cuda.device_count()


def own_cuda_device():
    """This rank's CUDA device index (its ``LOCAL_RANK``, as OneFlow places it), None without CUDA."""
    if cuda_device_count() == 0:
        return None
    return flow.cuda.current_device()


def own_cuda_generator():
    """OneFlow's default generator of this rank's CUDA device, None on a host without CUDA."""
    device = own_cuda_device()
    if device is None:
        return None
    return flow._oneflow_internal.default_generator(f"cuda:{device}")


def seed_own_cuda_device(seed):
    """Seed the default generator of this rank's CUDA device only (nothing on a CPU host)."""
    generator = own_cuda_generator()
    if generator is not None:
        generator.manual_seed(seed)
