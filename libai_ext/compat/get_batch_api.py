"""The two ``get_batch`` calling conventions, bound by the installed LiBai line.

0.1.1 calls ``get_batch(data, mixup_func)`` (evaluator: ``get_batch(data)``); main calls ``get_batch(data,
input_placement_device, mixup_func)`` (evaluator: without ``mixup_func``). Only the installed line tells what a
two-argument call's second argument is.
"""
import inspect

from . import detect


def split_arguments(args, kwargs, line=None):
    """``(input_placement_device or None, mixup_func)`` of a call ``get_batch(data, *args, **kwargs)``."""
    names = (line or detect.libai_line()).GET_BATCH_ARGUMENTS
    if len(args) > len(names):
        raise TypeError(f"get_batch() takes data and at most {len(names)} more arguments {names}, "
                        f"got {len(args)}")
    bound = dict(zip(names, args))
    for key, value in kwargs.items():
        if key not in names or key in bound:
            raise TypeError(f"get_batch() got an unexpected or repeated argument {key!r} (takes {names})")
        bound[key] = value
    return bound.get("input_placement_device"), bound.get("mixup_func")


def call_arguments(input_placement_device, mixup_func, line=None):
    """The positional arguments after ``data`` for a ``get_batch`` with the installed line's signature."""
    values = {"input_placement_device": input_placement_device, "mixup_func": mixup_func}
    return tuple(values[name] for name in (line or detect.libai_line()).GET_BATCH_ARGUMENTS)


def call_get_batch(get_batch, data, mixup_func=None):
    """``get_batch(data, ...)`` as the installed line's trainers call it (scripts, tools, tests), main's
    ``input_placement_device`` the layout's device kind."""
    from .layout import layer_placement

    return get_batch(data, *call_arguments(layer_placement(0).type, mixup_func))


def run_step_arguments(device_type=None, line=None):
    """What follows ``get_batch`` in ``trainer.run_step(get_batch, ...)``: main's input device, if any.

    Main's ``run_step`` defaults to ``"cuda"``, which its stock ``get_batch`` passes to
    ``tensor.to()`` before mixup: on a host without CUDA that aborts the process.
    """
    if "input_placement_device" not in (line or detect.libai_line()).GET_BATCH_ARGUMENTS:
        return ()
    if device_type is None:
        from .layout import layer_placement

        device_type = layer_placement(0).type
    return (device_type,)


def takes_input_device(run_step):
    """Whether an ``EagerTrainer``/``GraphTrainer``'s bound ``run_step`` takes main's input device after
    ``get_batch``; a project trainer written for 0.1.1 (LiBai main's own MoCo v3) takes ``get_batch`` alone."""
    parameters = list(inspect.signature(run_step).parameters.values())
    if any(p.kind is p.VAR_POSITIONAL for p in parameters):
        return True
    return len([p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]) >= 2


def with_input_device(get_batch, input_placement_device):
    """``get_batch`` in 0.1.1's convention, ``(data, mixup_func=None)``, for a project trainer that calls it so
    on LiBai main (whose second positional argument is the input device): the device is bound here."""

    def get_batch_with_device(data, mixup_func=None):
        return get_batch(data, input_placement_device, mixup_func)

    return get_batch_with_device
