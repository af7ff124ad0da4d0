"""Random generators a dataset (or a ``collate_fn``) owns: found by walking its attributes, and re-seeded.

Seeding the global streams per sample (``keyed_dataset``) does not reach a generator the dataset holds itself
(``self.rng = np.random.default_rng(0)``, a transform's ``random.Random``): it draws in read order, so its numbers
depend on the rank and loader worker (each worker holds a copy).  ``find_owned_generators`` walks an object's
attributes (a few levels deep, through containers and a function's closure, defaults, globals and bound instance)
and returns each generator of a known kind (``_KINDS``) with its path; ``GeneratorSite.reseed`` seeds the one at
that path on any copy of the dataset (a worker's).  What is keyed, and what is left alone: docs/data_order.md.
"""
import functools
import random
import types
from typing import NamedTuple, Tuple

import numpy as np
import oneflow as flow

MAX_DEPTH = 5  # attribute hops from the root (items of containers do not count)
MAX_ITEMS = 256  # larger containers are data (vocabularies, index lists), not configuration: not walked
_ONEFLOW_GENERATOR = type(flow.default_generator)
_KINDS = ((random.Random, "random.Random"), (np.random.RandomState, "numpy.random.RandomState"),
          (np.random.Generator, "numpy.random.Generator"), (np.random.BitGenerator, "numpy.random.BitGenerator"),
          (_ONEFLOW_GENERATOR, "oneflow.Generator"))
_LEAVES = (type(None), bool, int, float, complex, str, bytes, bytearray, np.ndarray, np.generic, flow.Tensor,
           types.ModuleType, type, memoryview, range)


class GeneratorSite(NamedTuple):
    """A generator at ``path`` (e.g. ``dataset.transform.transforms[1].rng``); ``steps`` reach it from the root."""
    path: str
    steps: Tuple
    kind: str

    def resolve(self, root):
        obj = root
        for how, key in self.steps:
            if how == "attr":
                obj = getattr(obj, key)
            elif how == "closure":
                obj = obj.__closure__[key].cell_contents
            elif how == "global":
                obj = obj.__globals__[key]
            else:
                obj = obj[key]
        return obj

    def reseed(self, root, seed):
        reseed(self.resolve(root), seed)


def generator_kind(obj):
    for cls, name in _KINDS:
        if isinstance(obj, cls):
            return name
    return None


def reseed(generator, seed):
    """Seed ``generator`` (any kind of ``_KINDS``) with the non-negative int ``seed`` in place."""
    if isinstance(generator, random.Random):
        generator.seed(seed)
    elif isinstance(generator, np.random.RandomState):
        generator.seed(seed % 2 ** 32)
    elif isinstance(generator, np.random.Generator):
        generator.bit_generator.state = type(generator.bit_generator)(seed).state
    elif isinstance(generator, np.random.BitGenerator):
        generator.state = type(generator)(seed).state
    elif isinstance(generator, _ONEFLOW_GENERATOR):
        generator.manual_seed(seed)
    else:
        raise TypeError(f"not a known kind of generator: {type(generator).__name__}")


def find_owned_generators(root, name):
    """Every generator reachable from ``root`` (called ``name`` in the paths), in walk order."""
    found, seen = [], set()
    _walk(root, name, (), 0, found, seen)
    return found


def _walk(obj, path, steps, depth, found, seen):
    if isinstance(obj, _LEAVES) or id(obj) in seen:
        return
    seen.add(id(obj))
    kind = generator_kind(obj)
    if kind is not None:
        found.append(GeneratorSite(path, steps, kind))
        return
    for child_path, child_steps, child, hops in _children(obj, path):
        if depth + hops <= MAX_DEPTH:
            _walk(child, child_path, steps + child_steps, depth + hops, found, seen)


def _children(obj, path):
    """``(path, steps, child, attribute hops)`` of what ``obj`` holds."""
    if isinstance(obj, (list, tuple)):
        if len(obj) <= MAX_ITEMS:
            yield from ((f"{path}[{i}]", (("item", i),), child, 0) for i, child in enumerate(obj))
    elif isinstance(obj, dict):
        if len(obj) <= MAX_ITEMS:
            yield from ((f"{path}[{k!r}]", (("item", k),), child, 0) for k, child in obj.items())
    elif isinstance(obj, types.MethodType):
        yield f"{path}.__self__", (("attr", "__self__"),), obj.__self__, 1
    elif isinstance(obj, types.FunctionType):
        yield from _function_children(obj, path)
    else:
        if isinstance(obj, functools.partial):
            yield f"{path}.func", (("attr", "func"),), obj.func, 1
            yield f"{path}.args", (("attr", "args"),), obj.args, 1
            yield f"{path}.keywords", (("attr", "keywords"),), obj.keywords, 1
        attributes = getattr(obj, "__dict__", None)
        if isinstance(attributes, dict):
            yield from ((f"{path}.{k}", (("attr", k),), child, 1) for k, child in list(attributes.items()))
        # A generator held by the class is shared by its instances: as much the dataset's own.
        shared = [(k, v) for cls in type(obj).__mro__[:-1] for k, v in vars(cls).items() if generator_kind(v)]
        yield from ((f"{path}.{k}", (("attr", k),), child, 1) for k, child in shared)


def _function_children(fn, path):
    # A function's own generators hide in its defaults, its closure and the globals it names.
    defaults = fn.__defaults__ or ()
    yield from ((f"{path}.__defaults__[{i}]", (("attr", "__defaults__"), ("item", i)), child, 1)
                for i, child in enumerate(defaults))
    for i, (var, cell) in enumerate(zip(fn.__code__.co_freevars, fn.__closure__ or ())):
        try:
            yield f"{path}.<closure {var}>", (("closure", i),), cell.cell_contents, 1
        except ValueError:  # an empty cell
            continue
    for name in fn.__code__.co_names:
        if name in fn.__globals__:
            yield f"{path}.<global {name}>", (("global", name),), fn.__globals__[name], 1
