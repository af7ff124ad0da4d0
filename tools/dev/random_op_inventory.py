#!/usr/bin/env python
"""OneFlow's random ops, found in OneFlow's own registries (``python tools/dev/random_op_inventory.py --write``).

A development tool: it writes ``libai_ext/random/oneflow_random_ops.py`` for the OneFlow that
pyproject.toml pins, and libai_ext refuses to route random ops on any other OneFlow.

Where a random op shows itself in the installed OneFlow:

* the Python functional API (``oneflow._C``): OneFlow's argument parser states each function's
  schema; a function whose schema takes a ``generator`` draws (asked without running it:
  ``accepts``, which only ever reaches the parser's errors);
* the functional registry the wheel ships (``include/oneflow/core/functional/functional_api.yaml.h``,
  generated from OneFlow's ``functional_api.yaml``): declarations with a ``one::Generator``
  parameter, and those that drop at a rate without one (a ``Dropout`` in the name, a
  ``dropout`` parameter: ``dropout1d/2d/3d``, the RNNs);
* the user-op registry it ships (``include/oneflow/core/framework/op_generated.h``): ops whose
  definition has a ``seed`` attribute, i.e. kernels that draw; the data-pipeline ones are called
  through ``oneflow._C.dispatch_<op>``;
* functions that draw from the default generator with no trace in any schema (``uniform_``):
  the tool calls every ``oneflow._C`` function with small arguments and watches the generator
  (``drew_from_default_generator``, in a child process: a bad argument can abort OneFlow).

Then the names users reach them by: ``oneflow.<name>`` and ``oneflow.nn.functional.<name>`` that
*are* the function, ``Tensor`` methods (C methods named after it, Python methods whose code calls
it), Python functions of those namespaces and of ``oneflow.nn.init`` whose code calls it, and the
``oneflow.nn`` modules whose ``forward`` does (read from their source: ``python_reach``).

``libai_ext/random/oneflow_random_ops.py`` holds the result for the OneFlow it was made from;
``tests/test_random_ops.py`` derives it again from the installed OneFlow.
"""
import ast
import importlib
import inspect
import os
import re
import textwrap
import warnings

import oneflow as flow

HEADERS = {"functional": "include/oneflow/core/functional/functional_api.yaml.h",
           "user_ops": "include/oneflow/core/framework/op_generated.h"}
NAMESPACES = {"oneflow": flow, "oneflow.nn.functional": flow.nn.functional}
PYTHON_NAMESPACES = ("oneflow", "oneflow.nn.functional", "oneflow.nn.init")

_POISON = object()
_MISSING = re.compile(r"missing required argument (\w+)")
_WRONG_TYPE = re.compile(r"argument '(\w+)' must be (.*?), not")
# A value of each type OneFlow's parser names, to get past an argument while asking about another.
_PARSER_VALUES = {
    "tensor": lambda: flow.full((2, 3, 4, 4), 0.5), "tensor tuple": lambda: [flow.full((2, 3, 4, 4), 0.5)],
    "shape": lambda: (2, 3), "shape list": lambda: [(2, 3)], "string": lambda: "none", "int64": lambda: 1,
    "int32": lambda: 1, "float": lambda: 0.5, "double": lambda: 0.5, "bool": lambda: True, "scalar": lambda: 0.5,
    "int32 list": lambda: [0], "int64 list": lambda: [0], "float list": lambda: [0.5], "dtype": lambda: flow.float32,
    "data type": lambda: flow.float32, "placement": lambda: flow.placement("cpu", [0]),
    "sbp list": lambda: [flow.sbp.broadcast], "sbp": lambda: flow.sbp.broadcast, "device": lambda: flow.device("cpu"),
    "index": lambda: 0,
}
_SIGNATURE_TYPES = {
    "Tensor": "tensor", "TensorTuple": "tensor tuple", "Shape": "shape", "ShapeList": "shape list", "Int64": "int64",
    "Int32": "int32", "Float": "float", "Double": "double", "Bool": "bool", "Scalar": "scalar",
    "Int32List": "int32 list", "Int64List": "int64 list", "FloatList": "float list", "DataType": "dtype",
    "Placement": "placement", "SbpList": "sbp list", "Sbp": "sbp", "Device": "device", "String": "string",
}


def oneflow_file(relative):
    return os.path.join(os.path.dirname(flow.__file__), relative)


# ---- the Python functional API, through its argument parser -----------------------------------------

def _own(value):
    """OneFlow's own function behind a wrapper that keeps it as ``__wrapped__`` (``random.oneflow_draws``)."""
    inner = getattr(value, "__wrapped__", None)
    return inner if inner is not None and type(inner).__name__ in _C_TYPES else value


_C_TYPES = ("builtin_function_or_method", "method_descriptor")


def python_functions():
    """``{name: function}`` of ``oneflow._C``'s functions (OneFlow's C functions only)."""
    functions = {name: _own(getattr(flow._C, name)) for name in sorted(dir(flow._C))}
    return {name: f for name, f in functions.items() if type(f).__name__ == "builtin_function_or_method"}


def _signatures(message):
    """The schemas listed in an 'invalid combination of arguments' error, as ``[[(type, name, has default)]]``."""
    listed = []
    for text in re.findall(r"\*\d+: \S+ \((.*)\)", message):
        params = []
        for part in (p.strip() for p in text.split(",")):
            if part and part != "*":
                declared, _, default = part.partition("=")
                kind, name = declared.rsplit(" ", 1)
                params.append((kind, name, bool(default)))
        listed.append(params)
    return listed


def accepts(function, parameter):
    """Whether ``function``'s schema (any of them) has ``parameter``, from the parser's errors alone.

    The parameter gets a value of no type OneFlow parses, the required ones before it valid values
    (discovered from the errors), so the call always fails in the parser: nothing runs."""
    kwargs = {parameter: _POISON}
    for _ in range(64):
        try:
            function(**kwargs)
        except Exception as error:  # OneFlow's parser raises TypeError, some functions RuntimeError
            message = str(error)
        else:
            raise RuntimeError(f"{function.__name__} ran with {sorted(kwargs)}: the probe must never run an op")
        if f"argument '{parameter}' must be" in message:
            return True
        if f"unexpected keyword argument '{parameter}'" in message:
            return False
        if "valid signatures are" in message:
            return any(name == parameter for params in _signatures(message) for _, name, _ in params)
        missing = _MISSING.search(message)
        if missing:
            kwargs[missing.group(1)] = _POISON
            continue
        wrong = _WRONG_TYPE.search(message)
        if wrong and wrong.group(1) != parameter and wrong.group(2) in _PARSER_VALUES:
            kwargs[wrong.group(1)] = _PARSER_VALUES[wrong.group(2)]()
            continue
        return None  # an argument of a type this probe cannot make (e.g. an OpExpr): unknown
    return None


def generator_functions():
    """``oneflow._C`` functions whose schema takes a ``generator``."""
    return sorted(name for name, function in python_functions().items() if accepts(function, "generator"))


def example_calls(function):
    """Keyword arguments for calling ``function`` with small valid values, one dict per schema the
    parser lists (only the parameters without a default); ``[]`` where some type cannot be made."""
    kwargs = {"generator": _POISON}  # (poisoned: the discovery never runs the op)
    for _ in range(64):
        try:
            function(**kwargs)
        except Exception as error:
            message = str(error)
        else:
            raise RuntimeError(f"{function.__name__} ran while its arguments were being discovered")
        if "unexpected keyword argument 'generator'" in message or "argument 'generator' must be" in message:
            kwargs.pop("generator")
            return [dict(kwargs)]
        if "valid signatures are" in message:
            calls = []
            for params in _signatures(message):
                required = [(kind, name) for kind, name, default in params if not default and name != "generator"]
                if all(kind in _SIGNATURE_TYPES for kind, _ in required):
                    calls.append({name: _PARSER_VALUES[_SIGNATURE_TYPES[kind]]() for kind, name in required})
            return calls
        missing = _MISSING.search(message)
        if missing:
            kwargs[missing.group(1)] = _POISON
            continue
        wrong = _WRONG_TYPE.search(message)
        if wrong and wrong.group(1) != "generator" and wrong.group(2) in _PARSER_VALUES:
            kwargs[wrong.group(1)] = _PARSER_VALUES[wrong.group(2)]()
            continue
        return []
    return []


def drew_from_default_generator(call):
    """Whether ``call()`` drew from OneFlow's default CPU generator.

    Right after ``manual_seed`` the Mersenne Twister's block is unused, so the first draw
    regenerates it and the saved state changes (later draws within a block would not show:
    OneFlow 0.9.0's state omits the position in the block)."""
    import numpy as np

    generator = flow.default_generator
    flow.manual_seed(20240101)
    before = generator.get_state().numpy().copy()
    call()
    flow._oneflow_internal.eager.Sync()
    return not np.array_equal(before, generator.get_state().numpy())


# ---- the registries the wheel ships ------------------------------------------------------------------

def _split_parameters(text):
    params, depth, current = [], 0, ""
    for ch in text:
        depth += (ch in "<(") - (ch in ">)")
        if ch == "," and depth == 0:
            params.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        params.append(current.strip())
    return [tuple(p.rsplit(" ", 1)) for p in params]


def functional_declarations():
    """``[(C++ name, [(C++ type, parameter name)])]`` of the functional registry."""
    with open(oneflow_file(HEADERS["functional"])) as f:
        text = f.read()
    return [(name, _split_parameters(params))
            for name, params in re.findall(r"^Maybe<[^>]+> (\w+)\((.*)\);$", text, re.M)]


def drawing_declarations():
    """Registry declarations that draw: ``{C++ name: why}``."""
    found = {}
    for name, params in functional_declarations():
        if any("one::Generator" in kind for kind, _ in params):
            found[name] = "generator parameter"
        elif re.search(r"Dropout(\dd)?$", name) and not name.endswith("Grad"):
            found[name] = "a dropout rate, no generator parameter"
        elif any(param == "dropout" for _, param in params):
            found[name] = "a dropout parameter"
    return found


def _listed_schemas(function):
    """The parameter names of each schema of a function with several (the parser lists them), else None."""
    try:
        function(libai_ext_probe=_POISON)
    except Exception as error:
        message = str(error)
    else:
        raise RuntimeError(f"{function.__name__} ran while its schemas were being read")
    if "valid signatures are" not in message:
        return None
    return [{name for _, name, _ in params} for params in _signatures(message)]


def _positional_count(function):
    try:
        function(*[_POISON] * 64)
    except Exception as error:
        found = re.search(r"takes (\d+) positional arguments", str(error))
        return int(found.group(1)) if found else None
    raise RuntimeError(f"{function.__name__} ran while its parameters were being counted")


def _normalized(name, cpp=False):
    if cpp:
        return re.sub(r"^global", "", name.lower())
    return name.lower().replace("_", "") + ("inplace" if name.endswith("_") else "")


class _Schemas:
    """The parser's answers about each function, asked once per derivation."""

    def __init__(self, candidates):
        self.candidates, self._listed, self._accepts, self._positional = candidates, {}, {}, {}

    def listed(self, name):
        if name not in self._listed:
            self._listed[name] = _listed_schemas(self.candidates[name])
        return self._listed[name]

    def accepts(self, name, parameter):
        if (name, parameter) not in self._accepts:
            self._accepts[(name, parameter)] = accepts(self.candidates[name], parameter)
        return self._accepts[(name, parameter)]

    def positional(self, name):
        if name not in self._positional:
            self._positional[name] = _positional_count(self.candidates[name]) or 0
        return self._positional[name]


def python_names_of(cpp_name, declaration_params, schemas):
    """The ``oneflow._C`` functions a registry declaration is bound to: a schema with exactly its
    parameters (the parser's list where it has several; else every parameter accepted and no more
    positional ones), then, where several remain, those whose name is the longest part of the
    declaration's (``RandN``: ``randn``, not ``rand``; ``Dropout2d``: ``dropout2d``)."""
    names = {param for _, param in declaration_params}
    exact = []
    for name in schemas.candidates:
        listed = schemas.listed(name)
        if listed is not None:
            matched = names in listed
        else:  # the last parameters (generator, dropout) rule most functions out first
            matched = all(schemas.accepts(name, param) for _, param in reversed(declaration_params)) and \
                schemas.positional(name) <= len(names)
        if matched:
            exact.append(name)
    named = [n for n in exact if _normalized(n) in _normalized(cpp_name, cpp=True)]
    if not named:
        return sorted(exact)
    longest = max(len(_normalized(n)) for n in named)
    return sorted(n for n in named if len(_normalized(n)) == longest)


def seeded_user_ops():
    """``{user op: [oneflow._C functions named after it]}`` for the ops whose definition has a seed
    attribute (``dispatch_ofrecord_reader`` for ``OFRecordReader``, ``one_embedding_lookup`` for
    ``EmbeddingLookup``); ``[]`` where only other functions reach the op (``uniform`` through ``rand``...)."""
    with open(oneflow_file(HEADERS["user_ops"])) as f:
        text = f.read()
    functions = python_functions()
    ops, current = {}, None
    for line in text.splitlines():
        declared = re.match(r"class (\w+)Op : public OpDefinition<", line)
        if declared:
            current = declared.group(1)
        elif current and re.search(r"virtual const int64_t& (random_)?seed\(\) const = 0;", line):
            key = current.lower()
            ops[current] = sorted(n for n in functions if n.replace("_", "").endswith(key)
                                  and (n.startswith(("dispatch_", "one_embedding_")) or n.replace("_", "") == key))
    return dict(sorted(ops.items()))


# ---- the names that reach them ------------------------------------------------------------------------

def aliases(functions):
    """``{function: ["oneflow.<name>", ...]}``: names in the public namespaces that *are* the function."""
    found = {name: [] for name in functions}
    ids = {id(_own(getattr(flow._C, name))): name for name in functions}
    for prefix, namespace in NAMESPACES.items():
        for attribute in sorted(dir(namespace)):
            name = ids.get(id(_own(getattr(namespace, attribute, None))))
            if name is not None:
                found[name].append(f"{prefix}.{attribute}")
    return found


_ONEFLOW_ROOTS = {"flow", "oneflow", "_C", "F", "functional", "nn", "init", "self", "tensor"}


def _root(node):
    while isinstance(node, ast.Attribute):
        node = node.value
    return getattr(node, "id", None)


def _called_names(function):
    """OneFlow names a function's code calls: ``flow._C.rand(...)`` -> ``rand``, ``self.uniform_(...)`` ->
    ``uniform_``, a bare ``normal_(...)``; not ``np.random.normal`` (numpy's), nor docstrings."""
    try:
        with warnings.catch_warnings():  # (escapes in OneFlow's docstrings)
            warnings.simplefilter("ignore")
            tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                names.add(func.id)
            elif isinstance(func, ast.Attribute) and _root(func) in _ONEFLOW_ROOTS:
                names.add(func.attr)
    return names


def _python_functions_of_oneflow():
    """``{qualified name: function}``: Python functions of the public namespaces and ``oneflow.nn.init``,
    Python ``Tensor`` methods, and ``forward`` of the ``oneflow.nn`` modules."""
    found = {}
    for prefix in PYTHON_NAMESPACES:
        namespace = importlib.import_module(prefix)
        for attribute in dir(namespace):
            value = _own(getattr(namespace, attribute, None))
            if inspect.isfunction(value):
                found[f"{prefix}.{attribute}"] = value
    for attribute in dir(flow.Tensor):
        value = _own(getattr(flow.Tensor, attribute, None))
        if inspect.isfunction(value):
            found[f"oneflow.Tensor.{attribute}"] = value
    for attribute in dir(flow.nn):
        value = getattr(flow.nn, attribute, None)
        if inspect.isclass(value) and issubclass(value, flow.nn.Module) and "forward" in value.__dict__:
            found[f"oneflow.nn.{attribute}"] = value.__dict__["forward"]
    return found


def python_reach(functions):
    """``{qualified name: [functions of the inventory it calls, directly or through another]}``."""
    defined = _python_functions_of_oneflow()
    calls = {name: _called_names(function) for name, function in defined.items()}
    short = {name: name.rsplit(".", 1)[1] for name in defined}
    reach = {name: set(called) & set(functions) for name, called in calls.items()}
    changed = True
    while changed:  # through other functions of the same namespaces (Tensor.uniform_ -> nn.init.uniform_)
        changed = False
        for name, called in calls.items():
            via = set().union(*[reach[other] for other in defined if short[other] in called and other != name])
            if not via <= reach[name]:
                reach[name] |= via
                changed = True
    return {name: sorted(found) for name, found in sorted(reach.items()) if found}


def tensor_c_methods(functions):
    """``{method: function}``: ``Tensor`` methods implemented in C named after a function of the inventory
    (OneFlow binds them to that functional)."""
    return {name: name for name in sorted(dir(flow.Tensor))
            if name in functions and type(_own(getattr(flow.Tensor, name))).__name__ == "method_descriptor"}


def derive(drawing=None):
    """The inventory of the installed OneFlow (see the module docstring).

    ``drawing``: ``{function: True/False}`` from the tool's calls (``drew_from_default_generator``);
    without it the inventory holds what the registries and the parser show."""
    schemas = _Schemas(python_functions())
    evidence = {name: ["generator parameter"] for name in schemas.candidates if schemas.accepts(name, "generator")}
    declarations = dict(functional_declarations())
    by_registry = {}
    for cpp, why in drawing_declarations().items():
        names = python_names_of(cpp, declarations[cpp], schemas)
        by_registry[cpp] = names
        for name in names:
            if why != "generator parameter":
                evidence.setdefault(name, []).append(f"registry: {why} ({cpp})")
    for name, drew in sorted((drawing or {}).items()):
        if drew:
            evidence.setdefault(name, []).append("draws from the default generator (called)")
    seeded = seeded_user_ops()
    for op, names in seeded.items():
        for name in names:
            evidence.setdefault(name, []).append(f"user op with a seed attribute ({op})")
    functions = sorted(evidence)
    found_aliases = aliases(functions)
    return {
        "oneflow": flow.__version__,
        "functions": {name: {"evidence": sorted(set(evidence[name])), "aliases": found_aliases[name]}
                      for name in functions},
        "registry": {cpp: names for cpp, names in sorted(by_registry.items())},
        "seeded_user_ops": seeded,
        "tensor_methods": tensor_c_methods(functions),
        "python": python_reach(functions),
    }


# ---- the generated module ------------------------------------------------------------------------

GENERATED = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir,
                                          "libai_ext", "random", "oneflow_random_ops.py"))
# Per line a child prints (its start-up included): a collective (``recv``) waits for a peer that never comes.
# An op on the scan's small inputs takes milliseconds, a child's start-up a few seconds on a loaded 2-core host.
_SCAN_TIMEOUT_S = 10


def _scan_child(names):
    """In a child process: call each function with small arguments; one line per function."""
    import json
    import sys

    functions = python_functions()
    for name in names:
        print("\nSTART", name, flush=True)
        drew = False
        for kwargs in example_calls(functions[name]):
            try:
                drew = drew_from_default_generator(lambda: functions[name](**kwargs)) or drew
            except Exception:  # a value of the right type may still be a wrong one for this op
                pass
        print("\nDONE", name, json.dumps(drew), flush=True)
    sys.stdout.flush()


def scan_default_generator_draws(python=None):
    """``{function: drew}`` for every ``oneflow._C`` function but the ``dispatch_*`` ones (they take an
    OpExpr), each called in a child process; a function that aborts OneFlow or hangs counts as not drawing
    and the scan goes on in a new child from the next one."""
    import json
    import queue
    import subprocess
    import sys
    import threading

    python = python or sys.executable
    pending = [n for n in python_functions() if not n.startswith("dispatch_")]
    results = {}
    while pending:
        child = subprocess.Popen([python, os.path.abspath(__file__), "--scan-child", *pending],
                                 stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        lines = queue.Queue()  # a reader thread: a hung op must not block the wait for its next line
        threading.Thread(target=lambda: [lines.put(line) for line in child.stdout] + [lines.put("")],
                         daemon=True).start()
        current = None
        while True:
            try:
                line = lines.get(timeout=_SCAN_TIMEOUT_S)
            except queue.Empty:
                break
            if not line:
                break
            word, *rest = line.split() or [""]
            if word == "START":  # (other lines: what an op printed)
                current = rest[0]
            elif word == "DONE":
                results[rest[0]], current = json.loads(rest[1]), None
        if child.poll() is None:
            os.killpg(child.pid, 9)
        child.wait()
        if current is None:
            break
        results[current] = False  # aborted or hung: it drew nothing observable
        pending = pending[pending.index(current) + 1:]
    return results


def render(inventory):
    """The generated module's text."""
    import pprint

    body = pprint.pformat(inventory, width=116, sort_dicts=True)
    return (f'"""OneFlow {inventory["oneflow"]}\'s random ops, as ``tools/dev/random_op_inventory.py`` found them in '
            f'its registries.\n\nGenerated by ``python tools/dev/random_op_inventory.py --write``: do not edit.\n"""\n'
            f"INVENTORY = {body}\n")


def main(argv=None):
    import argparse
    import sys

    parser = argparse.ArgumentParser(
        prog="tools/dev/random_op_inventory.py",
        description="Derive the random ops of the installed OneFlow from its registries (and by calling every "
                    "oneflow._C function once, in a child process) and print or write the inventory.")
    parser.add_argument("--write", action="store_true", help=f"write {os.path.relpath(GENERATED)}")
    parser.add_argument("--no-calls", action="store_true", help="registries and parser only (seconds, not minutes)")
    parser.add_argument("--scan-child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.scan_child:
        _scan_child(args.scan_child)
        return 0
    inventory = derive(None if args.no_calls else scan_default_generator_draws())
    text = render(inventory)
    if args.write:
        with open(GENERATED, "w") as f:
            f.write(text)
        print(f"wrote {GENERATED}: {len(inventory['functions'])} functions")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
