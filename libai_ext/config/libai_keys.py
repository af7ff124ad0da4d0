"""The config keys the installed LiBai reads, found in its source.

LiBai has no schema: each line reads its config where it needs a value (``cfg.train.seed``, ``try_get_key(cfg,
"train.amp.enabled")``, ``cfg.train.get("x")``) and hands parts of it on (``dist.setup_dist_util(cfg.train.dist)``
ends in ``cfg.tensor_parallel_size`` three calls deeper). ``libai_reads()`` parses the installed ``libai`` without
importing it, follows the reads through local aliases and through calls that pass part of the config on (by position
or keyword), and returns the dotted keys under ``ROOTS`` it reads or writes: any other key LiBai never looks at.
Derived from the installed source, the set is right for each LiBai line (0.1.1 and main read different keys) with no
list to keep up to date.
"""
import ast
import functools
import importlib.util
import os

ROOTS = ("train", "graph", "model", "dataloader", "optim")
# A bare name ``cfg`` or an attribute ``.cfg`` (``self.cfg``, ``trainer.cfg``) is the whole config.
CONFIG_NAME = "cfg"
# How deep a part of the config is followed into the functions it is handed to.
MAX_CALL_DEPTH = 6
# Keys LiBai's own default config (configs/common/train.py, 0.1.1 and main) sets although no code
# of either line reads them: a config copied from LiBai's holds them, and they are no typos.
UNREAD_DEFAULTS = ("train.consumed_train_samples", "train.consumed_valid_samples", "train.train_samples")


def _join(base, key):
    return f"{base}.{key}" if base else key


def _string(node):
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _callee_name(func):
    """``f`` of ``f(...)`` or ``x.f(...)``."""
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else None


def config_path(node, env):
    """The dotted config path ``node`` evaluates to ("" for the whole config), or None.

    ``env`` maps local names to the part of the config they hold.
    """
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        return "" if node.id == CONFIG_NAME else None
    if isinstance(node, ast.Attribute):
        base = config_path(node.value, env)
        if base is None:
            return "" if node.attr == CONFIG_NAME else None
        return _join(base, node.attr)
    if isinstance(node, ast.Subscript):
        base, key = config_path(node.value, env), _string(node.slice)
        return _join(base, key) if base is not None and key else None
    if isinstance(node, ast.Call) and node.args:
        if isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            base, key = config_path(node.func.value, env), _string(node.args[0])
            return _join(base, key) if base is not None and key else None
        if _callee_name(node.func) == "try_get_key" and len(node.args) >= 2:
            base, key = config_path(node.args[0], env), _string(node.args[1])
            return _join(base, key) if base is not None and key else None
    return None


def reads_in_function(nodes, parameters, env):
    """``(paths, calls)`` of one function, given as its nodes (``ast.walk``) and parameter names: the
    config paths it reads or writes, and its calls that pass a part of the config on, as
    ``(call, {argument position or keyword: path})``."""
    env = dict(env)
    assignments = [node for node in nodes if isinstance(node, ast.Assign) and len(node.targets) == 1
                   and isinstance(node.targets[0], ast.Name) and node.targets[0].id not in parameters]
    for _ in range(2):  # aliases (``graph = cfg.graph.train_graph``), in any order
        for node in assignments:
            path = config_path(node.value, env)
            if path is not None:
                env[node.targets[0].id] = path
    calls = [node for node in nodes if isinstance(node, ast.Call)]
    methods = {id(call.func) for call in calls}
    paths = set()
    for node in nodes:
        if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)) and id(node) not in methods:
            path = config_path(node, env)  # (a method such as ``cfg.train.items`` is no key)
            if path:
                paths.add(path)
    handed_on = []
    for call in calls:
        passed = {i: config_path(arg, env) for i, arg in enumerate(call.args)}
        passed.update({kw.arg: config_path(kw.value, env) for kw in call.keywords if kw.arg})
        passed = {where: path for where, path in passed.items() if path is not None}
        if passed:
            handed_on.append((call, passed))
    return paths, handed_on


def mentions_config(nodes):
    """Whether a function names the config at all (``cfg``, ``self.cfg``): the others read nothing of it
    unless a part of it is handed to them."""
    return any((isinstance(n, ast.Name) and n.id == CONFIG_NAME) or (isinstance(n, ast.Attribute) and n.attr ==
               CONFIG_NAME) for n in nodes)


def function_parameters(function):
    args = function.args
    return [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]


class LibaiSource:
    """The installed ``libai`` package's modules, parsed: its functions, classes and imports."""

    def __init__(self, package="libai"):
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise ImportError(f"{package} is not installed")
        root = list(spec.submodule_search_locations)[0]
        self.functions = {}  # qualified name -> (FunctionDef, module, class qualified name or None)
        self.classes = set()
        self.imports = {}  # module -> {local name: qualified name}
        self._walked = {}
        for folder, _, files in os.walk(root):
            for name in sorted(files):
                if name.endswith(".py"):
                    self._index(package, root, os.path.join(folder, name))

    def _index(self, package, root, path):
        parts = os.path.relpath(path, root)[:-3].split(os.sep)
        module = ".".join([package] + [p for p in parts if p != "__init__"])
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            # A module that never names the config (``cfg``) reads none of it: skipped, for speed, unless
            # it is a package's __init__ (its imports re-export the functions that do).
            wanted = CONFIG_NAME in text or os.path.basename(path) == "__init__.py"
            tree = ast.parse(text, filename=path) if wanted else None
        except (SyntaxError, UnicodeDecodeError, OSError):
            return
        if tree is None:
            return
        is_package = parts[-1] == "__init__"
        imports = self.imports.setdefault(module, {})
        for node in tree.body:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    imports[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else \
                        alias.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                base = self._absolute(module, is_package, node.module, node.level)
                for alias in node.names:
                    imports[alias.asname or alias.name] = f"{base}.{alias.name}"
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[f"{module}.{node.name}"] = (node, module, None)
            elif isinstance(node, ast.ClassDef):
                qualified = f"{module}.{node.name}"
                self.classes.add(qualified)
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self.functions[f"{qualified}.{item.name}"] = (item, module, qualified)

    @staticmethod
    def _absolute(module, is_package, name, level):
        if not level:
            return name or ""
        parts = module.split(".")
        base = parts if is_package else parts[:-1]
        base = base[:len(base) - (level - 1)]
        return ".".join(base + ([name] if name else []))

    def resolve(self, qualified):
        """Follow re-exports (``libai.config.try_get_key`` -> ``libai.config.config.try_get_key``)."""
        for _ in range(5):
            if qualified in self.functions or qualified in self.classes:
                return qualified
            module, _, name = qualified.rpartition(".")
            target = self.imports.get(module, {}).get(name)
            if target is None or target == qualified:
                return None
            qualified = target
        return None

    def callee(self, func, module, cls):
        """``(qualified function, parameters the call's arguments bind to)`` of a call, or None."""
        if isinstance(func, ast.Name):
            target = self.resolve(f"{module}.{func.id}") or self.resolve(self.imports[module].get(func.id, ""))
            bound = False
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            owner = func.value.id
            if owner in ("self", "cls") and cls:
                target, bound = self.resolve(f"{cls}.{func.attr}"), True
            else:
                base = self.imports[module].get(owner) or f"{module}.{owner}"
                target, bound = self.resolve(f"{base}.{func.attr}"), False
        else:
            return None
        if target in self.classes:
            target, bound = self.resolve(f"{target}.__init__"), True
        if target is None or target not in self.functions:
            return None
        node, _, owner_cls = self.functions[target]
        parameters = [a.arg for a in node.args.posonlyargs + node.args.args]
        decorators = {_callee_name(d) for d in node.decorator_list}
        if owner_cls and "staticmethod" not in decorators and (bound or "classmethod" in decorators):
            parameters = parameters[1:]
        return target, parameters

    def _nodes(self, qualified):
        if qualified not in self._walked:
            self._walked[qualified] = list(ast.walk(self.functions[qualified][0]))
        return self._walked[qualified]

    def reads(self):
        """Every config path LiBai's functions read or write, whole-config reads followed into calls."""
        found, done = set(), set()

        def visit(qualified, env, depth):
            state = (qualified, tuple(sorted(env.items())))
            if state in done or depth > MAX_CALL_DEPTH:
                return
            done.add(state)
            function, module, cls = self.functions[qualified]
            nodes = self._nodes(qualified)
            if not env and not mentions_config(nodes):
                return
            paths, calls = reads_in_function(nodes, function_parameters(function), env)
            found.update(paths)
            for call, passed in calls:
                target = self.callee(call.func, module, cls)
                if target is None:
                    continue
                name, parameters = target
                bound = {(parameters[where] if isinstance(where, int) else where): path
                         for where, path in passed.items()
                         if (isinstance(where, int) and where < len(parameters)) or where in parameters}
                if bound:
                    visit(name, bound, depth + 1)

        for qualified in sorted(self.functions):
            visit(qualified, {}, 0)
        return found


def keys_under_roots(paths):
    """``paths`` under ``ROOTS``, with every prefix of each (``train.dist`` for ``train.dist.x``)."""
    keys = set()
    for path in paths:
        parts = path.split(".")
        if parts[0] in ROOTS:
            keys.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return keys


@functools.lru_cache(maxsize=None)
def libai_reads(package="libai"):
    """The dotted keys under ``ROOTS`` the installed LiBai reads or writes (a frozenset), with the
    keys its default config sets unread (``UNREAD_DEFAULTS``)."""
    return frozenset(keys_under_roots(LibaiSource(package).reads() | set(UNREAD_DEFAULTS)))
