"""The package's layers: one folder per concern, each importing only the folders below it (``MAY_IMPORT``, as each
folder's ``__init__`` docstring says); the runtime imports neither ``libai_ext.cli`` nor ``libai_ext.testing``, and
no module imports itself back through another."""
import ast
import os

from libai_ext.lifetime import fault_points
from libai_ext.testing import fault_injection

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "libai_ext")
OUTSIDE_THE_RUNTIME = ("libai_ext.cli", "libai_ext.testing")
# folder -> the other folders of libai_ext its modules may import (docs/architecture.md)
MAY_IMPORT = {
    "compat": set(),
    "config": set(),
    "random": {"compat"},
    "data": {"random", "compat"},
    "lifetime": {"compat", "config"},
    "checkpoint": {"lifetime", "random", "compat", "config"},
    "models": {"random", "compat"},
    "layers": {"random"},  # the stochastic layers' old import path, an alias for a release
    "engine": {"checkpoint", "lifetime", "config", "random", "data", "compat", "models"},
    "cli": None,  # anything
    "testing": None,
}


def _modules():
    found = {}
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                found[dotted[:-len(".__init__")] if dotted.endswith(".__init__") else dotted] = path
    return found


def _imports(module, path, modules):
    """The libai_ext modules ``module`` imports, at import time or inside a function."""
    tree = ast.parse(open(path).read())
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                folder = os.path.join(ROOT, *submodule.split("."))
                is_extension = any(f.startswith(alias.name + ".") and f.endswith(".so")
                                   for f in os.listdir(os.path.dirname(folder))) if os.path.isdir(
                    os.path.dirname(folder)) else False
                found.add(submodule if submodule in modules or is_extension else base)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("libai_ext") and name != module}


def test_the_runtime_imports_neither_the_tools_nor_the_test_helpers():
    modules = _modules()
    runtime = {m: p for m, p in modules.items() if not m.startswith(OUTSIDE_THE_RUNTIME)}
    assert len(runtime) > 50
    offenders = {m: sorted(i for i in _imports(m, p, modules) if i.startswith(OUTSIDE_THE_RUNTIME))
                 for m, p in runtime.items()}
    assert {m: i for m, i in offenders.items() if i} == {}


def _folder(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or os.path.isdir(os.path.join(PACKAGE, parts[-1])) else None


def test_every_folder_imports_only_the_folders_below_it():
    modules = _modules()
    folders = {name for name in os.listdir(PACKAGE) if os.path.isfile(os.path.join(PACKAGE, name, "__init__.py"))}
    assert folders == set(MAY_IMPORT), "a folder of libai_ext missing from MAY_IMPORT (or gone)"
    top_level = sorted(m for m in modules if m != "libai_ext" and _folder(m) is None)
    assert top_level == [], "every module belongs to a folder of one concern"
    offenders = []
    for module, path in modules.items():
        folder = _folder(module)
        if folder is None or MAY_IMPORT[folder] is None:
            continue
        for imported in _imports(module, path, modules):
            target = _folder(imported)
            if target is not None and target != folder and target not in MAY_IMPORT[folder]:
                offenders.append(f"{module} imports {imported}")
    assert offenders == []


def test_every_folder_says_what_it_owns_and_may_import():
    for folder in MAY_IMPORT:
        doc = ast.get_docstring(ast.parse(open(os.path.join(PACKAGE, folder, "__init__.py")).read()))
        assert doc and len(doc) > 150 and "May import" in doc, folder


def test_no_import_circle():
    modules = _modules()
    graph = {m: {i for i in _imports(m, p, modules) if i in modules} for m, p in modules.items()}
    circles = []

    def visit(module, path):
        for imported in graph[module]:
            if imported in path:
                circles.append(path[path.index(imported):] + [imported])
            elif imported not in done:
                visit(imported, path + [imported])
        done.add(module)

    done = set()
    for module in graph:
        if module not in done:
            visit(module, [module])
    assert circles == []


def test_a_fault_point_does_nothing_until_a_hook_is_installed(monkeypatch):
    calls = []

    class Hook:
        def fault_point(self, phase, checkpoint):
            calls.append((phase, checkpoint))

    fault_points.fault_point("before_weights", "model_0000001")
    with fault_points.weights_being_written("model_0000001"):
        pass
    assert calls == []
    monkeypatch.setattr(fault_points, "_hook", Hook())
    fault_points.fault_point("before_weights", "model_0000001")
    assert calls == [("before_weights", "model_0000001")]


def test_ranks_get_the_fault_hook_only_when_the_environment_asks_for_an_action():
    assert fault_injection.with_fault_hook(["train_net.py"], {}) == ["train_net.py"]
    words = fault_injection.with_fault_hook(["-m", "libai_ext.cli.train_net"],
                                            {fault_injection.KILL_AT_ENV: "0:mid_weights:model_0000005"})
    assert words[1:] == ["-m", "libai_ext.cli.train_net"] and words[0].endswith("fault_injection.py")


def test_the_stochastic_layers_old_import_path_still_works():
    from libai_ext.layers import DropPath, Dropout
    from libai_ext.random import layers

    assert (Dropout, DropPath) == (layers.Dropout, layers.DropPath)
