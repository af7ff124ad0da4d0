"""Config keys nobody reads: a typo warned about by name, or refused when it is one of libai_ext's.

OmegaConf adds any key a config or an override sets and LiBai reads only the keys it knows, so
``train.randomnes="fast"`` trains under the default without a word. ``check_config_keys`` compares every key under
``train``, ``graph``, ``model``, ``dataloader`` and ``optim`` with the keys someone reads:

* a plain node: the keys the installed LiBai reads (``libai_keys``, from its source) and libai_ext's (``keys``); a
  node nobody reads by key (LiBai hands it on whole, e.g. ``graph.auto_parallel``) is not looked into;
* a ``LazyCall``: the parameters of its ``_target_`` (any key where it takes and uses ``**kwargs``); for a LiBai model
  built from ``cfg=dict(...)``, that dict's keys against the constructors and ``from_config`` of the models it builds
  and of LiBai's other models (LiBai's configs share one dict between a family's heads).

Each unknown key is named with the closest known one. ``guard_config_keys`` warns (rank 0, once per message) and
refuses, on every rank alike, a key whose closest known key is libai_ext's own: the config is the same on every rank,
so every rank stops at the same point and none waits for another.
"""
import ast
import difflib
import functools
import inspect
import logging
import textwrap

from libai.config.lazy import locate
from libai.utils import distributed as dist
from omegaconf import OmegaConf

from .keys import key_names, plugin_keys
from .libai_keys import ROOTS, libai_reads, reads_in_function

logger = logging.getLogger(__name__)
TARGET = "_target_"
# How alike a name and a key of libai_ext's must be for the name to be refused as its typo
# (randomnes/randomness 0.95, batch_chek/batch_check 0.95, seed_scop/seed_scope 0.95).
TYPO_LIKENESS = 0.85
_reported = set()


class UnknownConfigKeyError(ValueError):
    """A config sets a key of libai_ext's misspelt: the run would go on under the default."""


class UnknownKey:
    """``key`` (dotted) that nothing reads, with the closest known key and why it is unknown."""

    def __init__(self, key, suggestion, reader, refused):
        self.key, self.suggestion, self.reader, self.refused = key, suggestion, reader, refused

    def __str__(self):
        hint = f"; did you mean {self.suggestion}?" if self.suggestion else ""
        return f"{self.key}: {self.reader}{hint}"

    def __repr__(self):
        return f"UnknownKey({str(self)!r}, refused={self.refused})"


def known_keys():
    """Every dotted key LiBai (as installed) or libai_ext reads, with every prefix of each."""
    plugin = set()
    for name in key_names():
        parts = name.split(".")
        plugin.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return frozenset(libai_reads() | plugin)


def plugin_namespaces(known, owned):
    """Nodes every known key under which is libai_ext's own (``train.preemption`` for its keys)."""
    nodes = {name.rsplit(".", 1)[0] for name in owned if "." in name}
    return {node for node in nodes
            if all(k in owned for k in known if k.startswith(node + ".")) and node not in libai_reads()}


def target_name(target):
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', target)}"


def parameters(target):
    """The keyword names ``target`` accepts, or None where any is accepted or it cannot be told.

    A ``**kwargs`` that the code never uses (LiBai's Swin takes one and drops it) accepts nothing.
    """
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return None
    named = {name for name, p in signature.parameters.items()
             if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)}
    extra = [name for name, p in signature.parameters.items() if p.kind is inspect.Parameter.VAR_KEYWORD]
    if extra and not drops_keywords(target, extra[0]):
        return None
    return named


def drops_keywords(target, name):
    """Whether the code of ``target`` (its ``__init__`` for a class) never uses its ``**name``."""
    function = inspect.unwrap(target.__init__ if inspect.isclass(target) else target)
    tree, _ = _function_tree(function)
    if tree is None or tree.args.kwarg is None or tree.args.kwarg.arg != name:
        return False
    return not any(isinstance(node, ast.Name) and node.id == name for node in ast.walk(tree))


def _function_tree(function):
    """``function``'s AST (a ``def`` node) and its parameter names, or ``(None, [])`` without source."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function))).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return None, []
    if not isinstance(tree, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None, []
    return tree, [a.arg for a in tree.args.posonlyargs + tree.args.args]


def reads_of_parameter(function, position):
    """The top-level keys ``function`` reads from its parameter at ``position`` (``cfg.x``, ``cfg["x"]``)."""
    tree, names = _function_tree(function)
    if tree is None or len(names) <= position:
        return set()
    paths, _ = reads_in_function(list(ast.walk(tree)), names, {names[position]: ""})
    return {path.split(".")[0] for path in paths}


def is_configurable(target):
    """A LiBai ``@configurable`` class, built from one ``cfg`` dict through its ``from_config``."""
    return inspect.isclass(target) and inspect.ismethod(getattr(target, "from_config", None))


def cfg_keys(target):
    """The keys of the ``cfg`` dict that builds ``target`` (LiBai's models: ``LazyCall(GPTForPreTraining)(
    cfg=dict(...))``), or None where they cannot be told.

    A ``@configurable`` class takes its constructor's parameters and what its ``from_config`` reads; a wrapper handing
    ``cfg`` to such classes (``GPTModel(cfg)``) takes theirs and what it reads of ``cfg`` itself."""
    if is_configurable(target):
        accepted = parameters(target)
        return None if accepted is None else accepted | reads_of_parameter(target.from_config, 1)
    init = getattr(target, "__init__", None) if inspect.isclass(target) else None
    tree, names = _function_tree(init) if init is not None else (None, [])
    if tree is None or "cfg" not in names:
        return None
    namespace = vars(inspect.getmodule(target) or object())
    handed_to = [namespace.get(call.func.id) for call in ast.walk(tree) if isinstance(call, ast.Call)
                 and isinstance(call.func, ast.Name) and any(isinstance(a, ast.Name) and a.id == "cfg"
                                                             for a in call.args)]
    readers = [cls for cls in handed_to if is_configurable(cls)]
    keys = [cfg_keys(cls) for cls in readers]
    if not readers or any(k is None for k in keys):
        return None
    return set().union(*keys) | reads_of_parameter(init, names.index("cfg"))


@functools.lru_cache(maxsize=None)
def libai_model_cfg_keys():
    """The keys any of LiBai's own models reads from its ``cfg`` dict: LiBai's configs share one dict
    between a family's heads (``BertForClassification`` gets ``add_binary_head`` with BERT's common
    dict, which ``BertForPreTraining`` reads), so such a key is no typo."""
    import libai.models

    keys = set()
    for name in dir(libai.models):
        found = cfg_keys(getattr(libai.models, name)) if inspect.isclass(getattr(libai.models, name)) else None
        keys |= found or set()
    return frozenset(keys)


class KeyChecker:
    """One walk over a config's roots, collecting ``UnknownKey``s in ``self.found``."""

    def __init__(self, known=None, owned=None):
        self.known = known_keys() if known is None else frozenset(known)
        self.owned = plugin_keys() if owned is None else frozenset(owned)
        self.owned_nodes = plugin_namespaces(self.known, self.owned)
        self.found = []
        self.compared = 0  # keys looked up (a check that compares nothing proves nothing)

    def children(self, path):
        """Names of the known keys right under ``path``."""
        prefix = path + "."
        return {key[len(prefix):].split(".", 1)[0] for key in self.known if key.startswith(prefix)}

    def check(self, cfg):
        for root in ROOTS:
            node = cfg.get(root) if OmegaConf.is_dict(cfg) else None
            if OmegaConf.is_config(node):
                self.node(root, OmegaConf.to_container(node, resolve=False))
        return self.found

    def node(self, path, value):
        if isinstance(value, dict):
            if TARGET in value:
                self.lazy_call(path, value)
            else:
                self.plain(path, value)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                self.node(f"{path}.{i}", item)

    def plain(self, path, value):
        allowed = self.children(path)
        if not allowed:  # nobody reads this node by key: only the calls inside it are checked
            return self.calls_inside(path, value)
        for key, child in value.items():
            self.compared += 1
            if key in allowed:
                self.node(f"{path}.{key}", child)
            else:
                self.unknown(f"{path}.{key}", allowed, "not a key LiBai or libai_ext reads", elsewhere=True)

    def calls_inside(self, path, value):
        if isinstance(value, dict):
            if TARGET in value:
                return self.lazy_call(path, value)
            for key, child in value.items():
                self.calls_inside(f"{path}.{key}", child)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                self.calls_inside(f"{path}.{i}", item)

    def lazy_call(self, path, value):
        target = value[TARGET]
        try:
            target = locate(target) if isinstance(target, str) else target
        except Exception:  # LiBai's instantiate reports a target it cannot import
            target = None
        accepted = parameters(target) if target is not None else None
        cfg = cfg_keys(target) if isinstance(value.get("cfg"), dict) and target is not None else None
        if accepted is not None:
            accepted |= self.children(path) | ({"cfg"} if cfg is not None else set())
        for key, child in value.items():
            if key == TARGET:
                continue
            self.compared += accepted is not None
            if accepted is not None and key not in accepted:
                self.unknown(f"{path}.{key}", accepted, f"not a parameter of {target_name(target)} ({path}.{TARGET})")
            elif key == "cfg" and cfg is not None:
                self.model_cfg(f"{path}.cfg", child, cfg | self.children(f"{path}.cfg") | libai_model_cfg_keys(),
                               target)
            else:
                self.calls_inside(f"{path}.{key}", child)

    def model_cfg(self, path, value, accepted, target):
        for key, child in value.items():
            self.compared += 1
            if key in accepted:
                self.calls_inside(f"{path}.{key}", child)
            else:
                self.unknown(f"{path}.{key}", accepted, f"not read by {target_name(target)} (the models it builds "
                                                        "from cfg: their constructors and from_config)")

    def elsewhere(self, key, cutoff):
        """The known key under the same root whose last name is closest to ``key``'s (at least
        ``cutoff`` alike), or None; the shallowest one among equals."""
        root, name = key.split(".", 1)[0], key.rpartition(".")[2]
        by_name = {}
        for known in sorted(self.known, key=lambda k: (k.count("."), k)):
            if known.startswith(root + ".") and known != key:
                by_name.setdefault(known.rpartition(".")[2], known)
        close = difflib.get_close_matches(name, sorted(by_name), n=1, cutoff=cutoff)
        return by_name[close[0]] if close else None

    def suggestion(self, key, siblings, elsewhere):
        """The known key ``key`` most likely misspells: a close name beside it or, with ``elsewhere``
        (a node of the config's own layout, not a callable's parameters), first the same name at
        another level (``train.eval_period`` -> ``train.evaluation.eval_period``) and last a close
        name at another level."""
        parent, _, name = key.rpartition(".")
        same_name = self.elsewhere(key, cutoff=1.0) if elsewhere else None
        if same_name:
            return same_name
        close = difflib.get_close_matches(name, sorted(siblings), n=1, cutoff=0.6)
        if close:
            return f"{parent}.{close[0]}"
        return self.elsewhere(key, cutoff=0.8) if elsewhere else None

    def unknown(self, key, siblings, reader, elsewhere=False):
        suggestion = self.suggestion(key, siblings, elsewhere)
        self.found.append(UnknownKey(key, suggestion, reader, self.refused(key, suggestion)))

    def refused(self, key, suggestion):
        """A misspelt key of libai_ext's: under a node of its own, or a name that differs from one of
        its keys as a typo does (a key of the user's own merely like one, ``train.randomness_note``,
        is only warned about)."""
        if key.rpartition(".")[0] in self.owned_nodes:
            return True
        if suggestion not in self.owned:
            return False
        name, meant = key.rpartition(".")[2], suggestion.rpartition(".")[2]
        return name == meant or difflib.SequenceMatcher(None, name, meant).ratio() >= TYPO_LIKENESS


def check_config_keys(cfg):
    """The ``UnknownKey``s of ``cfg`` (refused ones first)."""
    found = KeyChecker().check(cfg)
    return sorted(found, key=lambda item: not item.refused)


def guard_config_keys(cfg):
    """Warn about unknown keys (rank 0, once each) and raise ``UnknownConfigKeyError`` for a misspelt
    key of libai_ext's, on every rank.  Returns the unknown keys."""
    found = check_config_keys(cfg)
    if dist.is_main_process():
        for item in found:
            if not item.refused and str(item) not in _reported:
                _reported.add(str(item))
                logger.warning(str(item))
    refused = [str(item) for item in found if item.refused]
    if refused:
        raise UnknownConfigKeyError("\n".join(refused) + "\n(a key of libai_ext's, misspelt: the run would go on "
                                    "under its default; fix the name)")
    return found
