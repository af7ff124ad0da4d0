"""The registry of every change libai_ext makes outside its own package (standard library only).

``PATCHES`` declares each one: what it changes (``targets``), why (a section of
docs/upstream-bugs.md, or the guarantee it serves), the LiBai line and device it applies to, the
config key that turns it off (or why none can), and the test that covers it.  The code that makes
a change goes through here, so that ``applied_patches()`` names, under every name it is reachable
by, each attribute of OneFlow, LiBai or flowvision replaced or added in this process, the class of
each train graph given the step, and each change to the process (signal handlers, the at-fork hook,
``prctl``, the profile function):

* ``replace(owner, name, replacement, reason, patch=None)``: ``owner.name = replacement``, once;
* ``temporarily(changes, patch)``: the same for the body of a ``with`` block only;
* ``process_change(patch, target, undo)``: a change of the process, with the call that undoes it
  (``released(target)`` when the owner undid it itself).

``restoring()`` undoes, on leaving it, every change made inside (tests, and users who run other
code in the same process after training); ``restore_all()`` undoes everything.  docs/architecture.md's
patch table is ``table_markdown()``, and ``libai-ext-train --list-patches`` prints ``table_text``.
"""
import collections
import contextlib
import sys
import types
import weakref

_ABSENT = object()

Patch = collections.namedtuple("Patch", "key targets why line device disable test scope")

_UPSTREAM = "docs/upstream-bugs.md"
_ROUTING_DISABLE = ('none with libai_ext.ConsistentBatchTrainer (under train.randomness="fast" the wrappers count '
                    "draws and warn); the stock trainer (train.trainer=libai.engine.DefaultTrainer) never installs it")
_REPAIR_DISABLE = "none: without it the installed LiBai stops on this line and device"

PATCHES = (
    Patch("compile_step", "libai.engine.default._compile_dependencies",
          f"{_UPSTREAM} #1 (the dataset-helper compile step needs a Makefile pip does not install)",
          "both (where the installed libai/data/data_utils lacks its Makefile)", "any", _REPAIR_DISABLE,
          "tests/test_compat.py", "process"),
    Patch("cuda_placements", "libai.utils.distributed.ttol (0.1.1), libai.evaluation.utils.pad_batch, "
          "libai.evaluation.evaluator.pad_batch",
          f"{_UPSTREAM} #6 (ttol and pad_batch build 'cuda' placements)", "both (ttol: 0.1.1)", "any (the tensor's "
          "own device decides)", _REPAIR_DISABLE, "tests/test_compat.py", "process"),
    Patch("cpu_layer_norm", "libai.layers.layer_norm.LayerNorm.forward",
          f"{_UPSTREAM} #7 (libai.layers.LayerNorm aborts the process on CPU)", "both",
          "any (CPU tensors take the functional form)", _REPAIR_DISABLE, "tests/test_environment.py", "process"),
    Patch("cpu_rms_norm", "libai.layers.layer_norm.RMSLayerNorm.forward",
          f"{_UPSTREAM} #33 (rms_norm has no CPU kernel: every LLM project of LiBai main stops on a CPU rank)",
          "main", "any (CPU tensors take x * rsqrt(mean(x^2) + eps) * weight)", _REPAIR_DISABLE,
          "tests/test_compat.py", "process"),
    Patch("hf_weights", "libai.models.utils.model_loader.base_loader.ModelLoaderHuggerFace._load_torch_state_dict, "
          "._convert_tensor",
          f"{_UPSTREAM} #36 (LiBai's HuggingFace loaders need PyTorch even for safetensors weights)", "main",
          "any (only where torch cannot be imported; .bin files keep LiBai's path)",
          "none: without torch LiBai cannot read the weights at all", "tests/test_compat.py", "process"),
    Patch("cpu_bias_gelu", "oneflow._C.fused_bias_add_gelu",
          "fused_bias_add_gelu has no CPU kernel in OneFlow 0.9.0 and LiBai's Swin hard-codes it "
          "(libai_ext/compat/cpu_bias_gelu.py)", "both", "any (CPU tensors take gelu(x + bias))", _REPAIR_DISABLE,
          "tests/test_compat_libai_zoo.py", "process"),
    Patch("swin_v0_1", "libai.models.swin_transformer.window_partition, .window_reverse, .SwinTransformer.__init__",
          f"{_UPSTREAM} #8 (LiBai 0.1.1's Swin: .view after .permute; blocks without a pipeline layer index)",
          "0.1.1", "any", _REPAIR_DISABLE, "tests/test_compat_libai_zoo.py", "process"),
    Patch("graph_proxy_v0_1", "oneflow.nn.graph.proxy.ProxyModule.origin, .config; "
          "oneflow.nn.graph.proxy.ProxyTensor.origin, .config (added)",
          f"{_UPSTREAM} #9 (LiBai 0.1.1's GraphBase on OneFlow 0.9.0)", "0.1.1", "any", _REPAIR_DISABLE,
          "tests/test_compat.py, tests/test_graph_libai.py", "process"),
    Patch("sampler_placement_rank", "libai.utils.distributed.get_data_parallel_rank",
          f"{_UPSTREAM} #2 (samplers read another shard than the stage-0 placement under data x pipeline parallelism)",
          "both", "any", "none with libai_ext.ConsistentBatchTrainer: its batches are built on the stage-0 placement",
          "tests/test_pairing.py, tests/test_patch_registry.py", "while the trainer builds its data loaders"),
    Patch("step_fed_graph", "the class of each train graph given the step (ConsistentBatchTrainer's, or "
          "libai_ext.feed_step(graph)): a subclass of it that also derives from libai_ext.StepFedGraph",
          "layout-invariant randomness: a train graph takes the step as an input, so it draws eager training's masks "
          "(docs/randomness.md)", "both", "any", "none with libai_ext.ConsistentBatchTrainer in graph mode",
          "tests/test_graph.py, tests/test_patch_registry.py", "the graph's lifetime"),
    Patch("special_tokens", "libai.tokenizer.build.build_tokenizer, libai.engine.default.build_tokenizer",
          f"{_UPSTREAM} #22 (T5's special tokens: [UNK] on 0.1.1, ids past the embedding on main)", "both", "any",
          "none: a declared special token outside the vocabulary is a wrong id on every run",
          "tests/test_compat_libai_zoo.py", "process"),
    Patch("random_op_routing", "oneflow._C.<every random op> with its oneflow.* and oneflow.nn.functional.* "
          "names, oneflow.Tensor.bernoulli, .bernoulli_, and every name a loaded module bound to one at import",
          f"layout-invariant randomness: a random op inside a forward draws from a keyed stream "
          f"({_UPSTREAM} #11, #17; docs/randomness.md)", "both", "any", _ROUTING_DISABLE,
          "tests/test_random_ops.py", "process"),
    Patch("batch_statistics", "oneflow._C.normalization, oneflow._C.normalization_add_relu",
          f"{_UPSTREAM} #25 (BatchNorm takes each data-parallel shard's statistics): layout-invariant training",
          "both", "any", 'train.randomness="fast" (installed under "layout_invariant" only; each call reads the mode)',
          "tests/test_batch_statistics.py", "process"),
    Patch("script_recording", "libai.engine.default.DefaultTrainer.train",
          "libai-ext-check-equivalence --script: every trainer a project's own script trains records its losses "
          "and modules (docs/tools.md)", "both", "any", "none: installed only in the tool's ranks, which run "
          "nothing else", "tests/test_libai_projects.py", "process (libai-ext-check-equivalence --script ranks)"),
    Patch("init_recording", "oneflow.Tensor (random fills, value and layout ops, data, detach, clone), "
          "oneflow.nn.Parameter.__init__, oneflow.normal/randn/rand and oneflow._C's",
          "layout-invariant initial weights: which tensor each init draw reached (docs/randomness.md)",
          "both", "any", 'train.randomness="fast"', "tests/test_param_init.py",
          "while the trainer builds the model"),
    Patch("graph_shared_params", "oneflow.Tensor.to_global",
          f"{_UPSTREAM} #20 (a parameter read on another pipeline stage aborts a CPU graph)", "both",
          "any (CPU placements only)", _REPAIR_DISABLE, "tests/test_shared_weights.py",
          "while libai_ext's GraphBase traces"),
    Patch("first_forward_check", "sys.setprofile",
          "layout-invariant randomness: OneFlow's random ops reached around the wrappers are named "
          "(libai_ext/random/layers/stochastic_ops.py)", "both", "any", _ROUTING_DISABLE, "tests/test_random_ops.py",
          "during a watched model's first training forward"),
    Patch("preemption_signals", "signal handlers of train.preemption.signals and the launcher's end "
          "(SIGRTMIN+6), signal.set_wakeup_fd, prctl(PR_SET_PDEATHSIG); SIGINT and SIGALRM during a preemption's save",
          "exact resume: a preempted run stops together and commits its checkpoint (docs/checkpoints.md)",
          "both", "any", "train.preemption.enabled=false", "tests/test_preemption_signals.py",
          "while the trainer trains"),
    Patch("fork_hook", "os.register_at_fork(after_in_child)",
          "a forked data loader worker gets the default signal handlers back (docs/checkpoints.md)",
          "both", "any", "train.preemption.enabled=false (registered when preemption is first armed; "
          "Python cannot unregister it: restoring makes it inert)", "tests/test_preemption_signals.py", "process"),
    Patch("die_with_launcher", "prctl(PR_SET_PDEATHSIG, SIGKILL)",
          "a rank ends with OneFlow's launcher (docs/checkpoints.md#ranks-end-with-their-launcher)", "both", "any",
          "environment LIBAI_EXT_DIE_WITH_LAUNCHER=0 (no config key: it is set before the config is read)",
          "tests/test_launcher_lifetime.py", "process (ranks started by OneFlow's launcher)"),
)
DECLARED = {patch.key: patch for patch in PATCHES}

class Change:
    """One change in force: ``owner.name`` (or a process change, ``owner`` None, reverted by ``undo()``)."""
    __slots__ = ("target", "patch", "reason", "owner", "name", "original", "undo")

    def __init__(self, target, patch, reason, owner, name, original, undo):
        self.target, self.patch, self.reason, self.owner = target, patch, reason, owner
        self.name, self.original, self.undo = name, original, undo


_applied = []  # Change records in force, oldest first (a temporary change may lie over a lasting one)


def qualified_name(owner, name):
    if isinstance(owner, types.ModuleType):
        return f"{owner.__name__}.{name}"
    if isinstance(owner, type):
        return f"{owner.__module__}.{owner.__qualname__}.{name}"
    return f"{type(owner).__module__}.{type(owner).__qualname__} object at {id(owner):#x}.{name}"


def _patch_of(target, reason, patch):
    if patch is not None:
        if patch not in DECLARED:
            raise KeyError(f"libai_ext patch {patch!r} is not declared in libai_ext.compat.patching.PATCHES")
        return DECLARED[patch]
    for declared in PATCHES:  # a caller that names no patch: the declared entry that lists the target
        if target in declared.targets.replace(",", " ").replace(";", " ").split():
            return declared
    return Patch(target, target, reason, "installed", "any", "none declared", "-", "process")


def _in_force(target):
    return any(change.target == target for change in _applied)


def replace(owner, name, replacement, reason, patch=None, over=False):
    """``owner.name = replacement``, once (``over``: also over a change in force); remembers why and what
    was there.  True if it changed something.  ``owner`` may be an object other than a module or class (a
    graph's ``__class__``): the record then holds it weakly and ends with it."""
    target = qualified_name(owner, name)
    if _in_force(target) and not over:
        return False
    if name == "__class__":
        original = type(owner)
    else:
        original = vars(owner).get(name, _ABSENT) if hasattr(owner, "__dict__") else getattr(owner, name, _ABSENT)
    setattr(owner, name, replacement)
    if not isinstance(owner, (types.ModuleType, type)):
        weakref.finalize(owner, released, target)
        owner = weakref.proxy(owner)
    _applied.append(Change(target, _patch_of(target, reason, patch), reason, owner, name, original, None))
    return True


def _remove(change):
    index = next(i for i, c in enumerate(_applied) if c is change)
    del _applied[index]
    above = [c for c in _applied[index:] if c.target == change.target]
    if above:  # a later change lies over this one: it will put back what this one found
        above[0].original, above[0].undo = change.original, change.undo
    elif change.undo is not None:
        change.undo()
    elif change.original is _ABSENT:
        delattr(change.owner, change.name)
    else:
        setattr(change.owner, change.name, change.original)


def undo(target):
    """Undo the newest change of ``target`` (a dotted name); False if none is in force."""
    found = [change for change in _applied if change.target == target]
    if found:
        _remove(found[-1])
    return bool(found)


def undo_patch(key):
    """Undo every change of the declared patch ``key``, newest first; returns how many."""
    found = changes(key)
    for change in reversed(found):
        _remove(change)
    return len(found)


def changes(key):
    """The ``Change`` records of patch ``key`` in force now."""
    return [change for change in _applied if change.patch.key == key]


@contextlib.contextmanager
def temporarily(replacements, patch):
    """``owner.name = replacement`` for each ``(owner, name, replacement)`` while the body runs (over any
    change in force)."""
    made = []
    try:
        for owner, name, replacement in replacements:
            replace(owner, name, replacement, DECLARED[patch].why, patch, over=True)
            made.append(_applied[-1])
        yield
    finally:
        for change in reversed(made):
            _remove(change)


def process_change(patch, target, undo_call):
    """Record a change of the process made by the caller (``undo_call()`` reverts it); once per target."""
    if not _in_force(target):
        _applied.append(Change(target, DECLARED[patch], DECLARED[patch].why, None, target, None, undo_call))


def released(target):
    """The caller undid the process change ``target`` itself."""
    _applied[:] = [change for change in _applied if change.target != target]


def restore_all():
    """Undo every change, newest first."""
    for change in reversed(list(_applied)):
        _remove(change)


@contextlib.contextmanager
def restoring():
    """On leaving, undo every change made inside (those made before stay)."""
    before = list(_applied)
    try:
        yield
    finally:
        for change in reversed([c for c in _applied if not any(c is b for b in before)]):
            _remove(change)


def applied():
    """``{"module.attribute": reason}`` for every change in force."""
    return {change.target: change.reason for change in _applied}


_ALIAS_ROOTS = ("oneflow", "libai", "flowvision")


def _names_of(owners):
    """``{id(owner): [every dotted name a loaded module gives it]}`` (OneFlow's, LiBai's, flowvision's)."""
    names = {id(owner): [] for owner in owners}
    for module_name, module in list(sys.modules.items()):
        if module is None:
            continue
        if id(module) in names:
            names[id(module)].append(module_name)
        if module_name.split(".", 1)[0] not in _ALIAS_ROOTS:
            continue
        for key, value in list(getattr(module, "__dict__", {}).items()):
            if isinstance(value, type) and id(value) in names:
                names[id(value)].append(f"{module_name}.{key}")
    return names


def applied_patches():
    """The changes in force in this process, one dict each: ``target``, ``names`` (every dotted name the
    changed attribute is reachable by), ``patch``, ``why``, ``line``, ``device``, ``disable``, ``test``,
    ``scope``."""
    aliases = _names_of([change.owner for change in _applied if change.owner is not None])
    rows = []
    for change in _applied:
        names = [change.target]
        if change.owner is not None:
            names += [f"{prefix}.{change.name}" for prefix in aliases.get(id(change.owner), ())]
        row = dict(change.patch._asdict(), target=change.target, names=sorted(set(names)), patch=change.patch.key)
        row.pop("key")
        rows.append(row)
    return rows


def summary():
    """One line: how many changes of which patches are in force."""
    counts = collections.Counter(change.patch.key for change in _applied)
    return (f"libai_ext patches in force: {sum(counts.values())} changes "
            f"({', '.join(f'{key} {n}' for key, n in counts.items()) or 'none'}); "
            "libai-ext-train --list-patches prints the table")


TABLE_COLUMNS = ("key", "targets", "why", "line", "device", "scope", "disable", "test")


def table_markdown():
    """The declared patches as a Markdown table (docs/architecture.md holds this text)."""
    lines = ["| " + " | ".join(TABLE_COLUMNS) + " |", "|" + "---|" * len(TABLE_COLUMNS)]
    for patch in PATCHES:
        cells = [str(getattr(patch, column)).replace("|", "\\|") for column in TABLE_COLUMNS]
        cells[0] = f"`{cells[0]}`"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table_text(rows):
    """``rows`` (``applied_patches()``-like dicts, or ``Patch`` records) as plain text, one block each."""
    out = []
    for row in rows:
        row = row._asdict() if isinstance(row, Patch) else row
        out.append(f"{row.get('patch', row.get('key'))}: {row.get('target', row.get('targets'))}")
        for column in ("why", "line", "device", "scope", "disable", "test"):
            out.append(f"    {column:<8} {row[column]}")
    return "\n".join(out)
