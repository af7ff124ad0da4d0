"""Which LiBai line is installed, and what it lacks, read from the installed code itself.

Each decision is a feature test (a signature, a file), not a version string: a LiBai from any commit between 0.1.1
and main is handled by what it actually does.
"""
import functools
import inspect
import os


def parameters(function):
    """Names of ``function``'s parameters, in order (``cls``/``self`` excluded for bound methods)."""
    return list(inspect.signature(function).parameters)


@functools.lru_cache(maxsize=None)
def get_batch_takes_device():
    """LiBai main: ``DefaultTrainer.get_batch(data, input_placement_device, mixup_func)``."""
    from libai.engine import DefaultTrainer

    return "input_placement_device" in parameters(DefaultTrainer.get_batch)


def ttol_takes_device():
    """LiBai main: ``dist.ttol(tensor, pure_local, device, ranks)``; 0.1.1 hard-codes ``"cuda"``."""
    from libai.utils import distributed as dist

    return "device" in parameters(dist.ttol)


def compile_step_can_run(data_utils_dir=None):
    """Whether ``default_setup``'s ``make`` in ``libai/data/data_utils`` has a Makefile to run: pip's 0.1.1 sdist and
    main's archive leave it out; an editable checkout keeps it, and there the step works."""
    if data_utils_dir is None:
        import libai.data.data_utils as data_utils

        data_utils_dir = os.path.dirname(data_utils.__file__)
    return os.path.isfile(os.path.join(data_utils_dir, "Makefile"))


def libai_line():
    """The module of ``libai_ext.compat`` that describes the installed LiBai line."""
    from . import libai_main, libai_v0_1

    return libai_main if get_batch_takes_device() else libai_v0_1
