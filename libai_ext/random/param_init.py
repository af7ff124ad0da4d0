"""Initial weights from the seed alone: ``train.randomness="layout_invariant"`` (docs/init.md).

After a build inside ``recording_init`` (``init_recipes``), every parameter and buffer whose value came from a random
draw is drawn again from ``counter_rng``, keyed by ``(seed, "param_init", qualified name)`` and each element's
*global* index, with the distribution the model's code asked for; then the recorded ops are replayed. The value
depends on nothing else: not the layout, the build order or OneFlow's generator, and no asynchronous local init can
race. Copies and exact derivations follow their source (``DrawKeys``), so a deep-copied EMA teacher equals its
student, whose values are those it gets without a teacher.

Each rank computes only its own shards (plus its stage's replicated tensors), as OneFlow's init does; the extra memory
is one tensor's float64 intermediates. A derivation is re-run where its sources were drawn, as the model's code ran it.

What is refused (before anything changes, naming the tensor's module and attribute): docs/init.md. The ``strict``
check is decided by what reaches the model, as a build may draw and discard (LiBai main's ``RobertaEmbeddings``): when
some draw reached no parameter or buffer by a tracked path, ``untracked_reach`` builds the model again with every
generator seeded otherwise and refuses a tensor that is not re-drawn yet changes. That costs one more build and its
memory (both builds' shards at once on each rank), only for models that discard draws; above ``rebuild_limit`` bytes
on any rank (``train.init_rebuild_limit_gib``) the stray draws are refused by name instead.
"""
import hashlib
import random

import numpy as np
import oneflow as flow

from .counter_rng import counter_normal, counter_unit, derive_keys
from .init_recipes import LAYOUT_OPS, recording_init
from .rng_state import preserved_rng_state

_STREAM = "param_init"
# train.init_rebuild_limit_gib's default: a rank holding more parameters and buffers is not built twice.
DEFAULT_REBUILD_LIMIT_GIB = 16


def named_tensors(model):
    """(qualified name, tensor) for every parameter and buffer, each shared tensor once under
    its first name (tied weights get one value, keyed by that name)."""
    seen, named = set(), []
    for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
        if tensor is not None and id(tensor) not in seen:
            seen.add(id(tensor))
            named.append((name, tensor))
    return named


def _replay(recipe, tensor, with_layout):
    with flow.no_grad():
        for name, args, kwargs in recipe.ops:
            if name in LAYOUT_OPS:
                if with_layout:
                    tensor = getattr(tensor, name)(*args, **kwargs)
            elif name == "__setitem__":
                tensor[args[0]] = args[1]
            else:
                getattr(tensor, name)(*args, **kwargs)
    return tensor


def _evaluate(recipe, draw_values):
    """``recipe``'s value where the model's code made it: each draw's values from
    ``draw_values(draw)`` (in the draw's own layout), then every op and move replayed."""
    with flow.no_grad():
        if recipe.drawn:
            values = draw_values(recipe.root).clone()
        else:
            values = recipe.root.compute(lambda source: _evaluate(source, draw_values))
        return _replay(recipe, values, with_layout=True)


def _local(tensor):
    """This rank's part of ``tensor``; nothing on a rank outside its placement, where OneFlow 0.9.0 gives a 0-dim
    tensor one uninitialised element (a BatchNorm's ``num_batches_tracked`` on another pipeline stage)."""
    tensor = tensor.detach()
    if not tensor.is_global:
        return tensor
    if flow.env.get_rank() not in tensor.placement.ranks:
        return flow.zeros(0, dtype=tensor.dtype)
    return tensor.to_local()


def _same_layout(a, b):
    if a.is_global != b.is_global or tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
        return False
    return (a.placement == b.placement and a.sbp == b.sbp) if a.is_global else a.device == b.device


def _replay_matches(recipe, tensor):
    """Replaying the recipe on the drawn copies gives ``tensor``'s value (this rank's part)."""
    replayed = _evaluate(recipe, lambda draw: draw.raw)
    return _same_layout(replayed, tensor) and np.array_equal(_local(replayed).numpy(), _local(tensor).numpy())


def _sum_over_ranks(counts):
    """Element-wise sum of an int vector over all ranks (every rank must call it)."""
    counts = np.asarray(counts, dtype=np.int64)
    world = flow.env.get_world_size()
    if world == 1 or not counts.size:
        return counts
    placement = flow.placement("cpu", list(range(world)))
    summed = flow.tensor(counts).to_global(placement=placement, sbp=flow.sbp.partial_sum)
    return summed.to_global(sbp=flow.sbp.broadcast).to_local().numpy()


class DrawKeys:
    """The counter keys of every draw, named after one tensor that holds it: the tensor it was
    drawn into (or moved from there) if it is in the model, else its first copy, else the first
    tensor derived from it (``checked`` order).  Copies and derivations then follow their
    source, and adding them (an EMA teacher, ``w * 0.5``) changes no other tensor's values."""

    def __init__(self, checked, seed):
        self.seed, self.owner = seed, {}
        for rank in ((lambda recipe: recipe.drawn and not recipe.copied), (lambda recipe: recipe.drawn),
                     (lambda recipe: True)):
            for name, _, recipe in checked:
                if rank(recipe):
                    for draw in recipe.draws():
                        self.owner.setdefault(id(draw), name)
        self._words, count = {}, {}
        for name, _, recipe in checked:  # a tensor made from several draws: words of their own for each
            for draw in recipe.draws():
                if id(draw) not in self._words and self.owner[id(draw)] == name:
                    k = count[name] = count.get(name, -1) + 1
                    self._words[id(draw)] = (name,) if k == 0 else (f"{name}#{k}",)

    def __call__(self, draw):
        return [derive_keys(self.seed, _STREAM, *self._words[id(draw)], stream) for stream in range(2)]


def draw_values(draw, keys, like):
    """``draw``'s distribution from the counter stream ``keys``, laid out like ``like``."""
    layout = dict(placement=like.placement, sbp=like.sbp) if like.is_global else dict(device=like.device)
    shape = tuple(like.shape)
    if draw.kind == "uniform":
        low, high = draw.args
        values = low + (high - low) * counter_unit(shape, keys[0], **layout)
    else:
        mean, std = draw.args
        values = mean + std * counter_normal(shape, keys, **layout)
    return values.to(draw.raw.dtype)  # the model's ops ran on the drawn dtype


def seeded_values(recipe, keys, like):
    """``recipe``'s value from the counter stream (``keys(draw)``), laid out like ``like``.

    A recipe rooted in one draw of ``like``'s shape is drawn right in ``like``'s layout (each
    rank its own shards); a derived one is re-run where the model's code ran it.
    """
    if recipe.drawn and recipe.shape == tuple(like.shape):
        values = draw_values(recipe.root, keys(recipe.root), like)
        return _replay(recipe, values, with_layout=False).to(like.dtype)
    cache = {}

    def values_of(draw):
        if id(draw) not in cache:
            cache[id(draw)] = draw_values(draw, keys(draw), draw.raw)
        return cache[id(draw)]
    return _evaluate(recipe, values_of).to(like.dtype)


def _local_digest(tensor):
    return hashlib.sha1(np.ascontiguousarray(_local(tensor).numpy()).tobytes()).digest()


def _untracked_copies(named, recorder, checked):
    """Tensors with no record holding exactly the value of one that is re-drawn: a copy by a
    path the recorder does not watch (numpy, a file).  Kept, it would stop matching its source."""
    kept = [(name, tensor) for name, tensor in named if recorder.lookup(tensor) is None
            or not recorder.lookup(tensor).random]
    pairs = [(name, tensor, other, source) for name, tensor in kept if tensor.is_floating_point()
             for other, source, _ in checked if _same_layout(tensor, source)]
    if not pairs:  # the same on every rank: layouts are global properties
        return []
    digests = {}
    for _, tensor, _, source in pairs:
        for t in (tensor, source):
            if id(t) not in digests:
                digests[id(t)] = _local_digest(t)
    sources = list({id(source): source for *_, source in pairs}.values())
    varying = [int(_local(s).numel() > 0 and float(_local(s).max()) != float(_local(s).min())) for s in sources]
    counts = _sum_over_ranks([digests[id(t)] != digests[id(s)] for _, t, _, s in pairs] + varying)
    random_sources = {id(s) for s, count in zip(sources, counts[len(pairs):]) if count > 0}
    return [f"{name}: holds exactly the initial values of {other}, which is re-drawn, but got them by a path "
            f"the recorder does not watch (e.g. through numpy or a file); make it with .clone(), copy.deepcopy "
            f"or copy_, which follow their source" for (name, _, other, source), differ in zip(pairs, counts)
            if differ == 0 and id(source) in random_sources]


def describe_tensor(model, name):
    """``"a.b.weight (parameter 'weight' of a.b: Linear)"``: a tensor of ``model`` by its module and attribute."""
    path, _, attribute = name.rpartition(".")
    module = dict(model.named_modules()).get(path)
    if module is None:
        return name
    kind = ("parameter" if attribute in module._parameters else "buffer" if attribute in module._buffers
            else "attribute")
    return f"{name} ({kind} {attribute!r} of {path or 'the model'}: {type(module).__name__})"


def _problems(model, named, recorder):
    """What cannot be re-drawn faithfully, as messages (the same on every rank)."""
    problems, checked = [], []
    for name, tensor in named:
        storage = recorder.lookup(tensor)
        if storage is None or not storage.random:
            continue
        where = describe_tensor(model, name)
        if storage.unsupported is not None:
            problems.append(f"{where}: {storage.unsupported}")
        elif tensor.is_global and flow.sbp.partial_sum in tensor.sbp:
            problems.append(f"{where}: a partial-sum tensor drawn at {storage.recipe.site}")
        elif storage.recipe.drawn and tuple(tensor.shape) != storage.recipe.shape:
            problems.append(f"{where}: drawn with shape {storage.recipe.shape}, now {tuple(tensor.shape)}")
        else:
            checked.append((name, tensor, storage.recipe))
    mismatched = _sum_over_ranks([not _replay_matches(recipe, tensor) for _, tensor, recipe in checked])
    problems += [f"{describe_tensor(model, name)}: replaying {recipe.describe()} (made at {recipe.site}) does not "
                 f"give its value: an in-place op the recorder does not watch changed it"
                 for (name, _, recipe), bad in zip(checked, mismatched) if bad]
    problems += _untracked_copies(named, recorder, checked)
    return problems, checked


def _stray_sites(named, recorder, checked):
    """Where random values were made that went nowhere the recorder saw (their last holder was
    neither a parameter/buffer nor read by a watched op): an untracked path (numpy, ``item()``)
    may have carried them into the model."""
    reached = {id(recorder.lookup(tensor)) for _, tensor in named}
    reached_draws = {id(draw) for _, _, recipe in checked for draw in recipe.draws()}
    # Draws some tensor still holds: a value derived from a draw that was overwritten since (e.g.
    # ``w[0][0]`` to compute a fan before ``w`` is drawn again) is no lost random value.
    held = {id(s.recipe.root) for s in recorder.storages() if s.recipe is not None and s.recipe.drawn}

    def stray(storage):
        if not storage.random or storage.consumed or id(storage) in reached:
            return False
        if storage.recipe is None:
            return not storage.derived  # a derivation that cannot be reproduced is judged by its sources
        draws = {id(draw) for draw in storage.recipe.draws()}
        return not draws & reached_draws and (storage.recipe.drawn or bool(draws & held))
    return sorted({s.recipe.site if s.recipe is not None else s.unsupported for s in recorder.storages() if stray(s)})


def model_tensors(model):
    """``{name: tensor}`` of every parameter, buffer and plain tensor attribute of ``model``'s modules
    (what its forward can read), each tensor once."""
    found = dict(named_tensors(model))
    seen = {id(tensor) for tensor in found.values()}
    for path, module in model.named_modules():
        for attribute, value in vars(module).items():
            if isinstance(value, flow.Tensor) and id(value) not in seen:
                seen.add(id(value))
                found[f"{path}.{attribute}" if path else attribute] = value
    return found


def _kept_digests(model, redrawn):
    return {name: _local_digest(tensor) for name, tensor in model_tensors(model).items() if name not in redrawn}


def _other_generators():
    """Seed OneFlow's, numpy's and python's generators with another seed than the build had."""
    other = (flow.default_generator.initial_seed() + 0x9E3779B9) % 2 ** 32
    flow.manual_seed(other)
    np.random.seed(other)
    random.seed(other)


def untracked_reach(model, redrawn, rebuild):
    """Names of the tensors of ``model`` (parameters, buffers, plain tensor attributes) that are not
    in ``redrawn`` and yet change when ``rebuild()`` builds the model again with every generator
    seeded otherwise: random values reached them by a path the recorder does not follow.  Every
    rank must call it (the answer is the same on every rank)."""
    kept = _kept_digests(model, redrawn)
    with preserved_rng_state():
        _other_generators()
        again = _kept_digests(rebuild(), redrawn)
    names = sorted(kept)
    changed = _sum_over_ranks([name not in again or again[name] != kept[name] for name in names])
    return [name for name, count in zip(names, changed) if count > 0]


def _any_rank(flag):
    return bool(_sum_over_ranks([int(bool(flag))])[0])


UNTRACKED_FIX = ("give it its values with a watched op on the whole tensor (nn.init.normal_ / uniform_ / "
                 "trunc_normal_, Tensor.normal_ / uniform_: re-drawn from train.seed), copy them with .clone(), "
                 "copy_ or copy.deepcopy (followed), register a tensor the forward reads as a buffer, or load "
                 "the values with train.load_weight")


def local_bytes(named):
    """Bytes of this rank's part of the tensors ``named`` (what one more build of the model holds here)."""
    return sum(_local(tensor).numel() * _local(tensor).element_size() for _, tensor in named)


def _reach_problems(model, recorder, named, checked, rebuild, rebuild_limit=None):
    """Messages for the tensors that random values reached by an untracked path (``strict``)."""
    strays = _stray_sites(named, recorder, checked)
    if not _any_rank(strays):
        return []
    if rebuild is not None and rebuild_limit is not None:
        held = local_bytes(named)
        if _any_rank(held > rebuild_limit):
            sites = ", ".join(strays) or "on another rank"
            return [f"random draws that reached no parameter or buffer by a tracked path ({sites}): telling a "
                    "discarded draw from one that got into the model untracked builds the model a second time on "
                    f"every rank, and a rank holds more than train.init_rebuild_limit_gib="
                    f"{rebuild_limit / 2 ** 30:g} GiB of parameters and buffers (this rank {held / 2 ** 30:.2f} GiB); "
                    "raise train.init_rebuild_limit_gib if every rank has memory for two copies of its shards, or "
                    "make the model's build draw only into the tensors it keeps"]
    if rebuild is None:
        return [f"a random draw that reached no parameter or buffer by a tracked path: {site} (pass the build "
                "function, build_with_seeded_init(build, seed), to tell a discarded draw from one that reached "
                "the model)" for site in strays]
    reached = untracked_reach(model, {name for name, _, _ in checked}, rebuild)
    sites = ", ".join(strays) or "on another rank"
    return [f"{describe_tensor(model, name)}: its initial values change with OneFlow's generator but come from no "
            f"draw the recorder follows (random values made at {sites} reached it by an untracked path such as "
            f"numpy or an in-place draw into a view); {UNTRACKED_FIX}" for name in reached]


def reinitialize(model, recorder, seed, strict=True, rebuild=None, rebuild_limit=None):
    """Re-draw every randomly initialised parameter/buffer of ``model`` from ``seed``; every rank must call it.

    Returns ``{name: recipe description}`` (a tensor that follows another names it). Raises ``RuntimeError``, before
    changing anything, listing every tensor it cannot reproduce. ``strict`` also refuses tensors random values reached
    by an untracked path: ``rebuild()`` (building the same model again) tells a discarded draw from one that reached
    the model; without it, or above ``rebuild_limit`` bytes on any rank (None: no limit), every such draw is refused.
    """
    named = named_tensors(model)
    problems, checked = _problems(model, named, recorder)
    if strict:
        problems += _reach_problems(model, recorder, named, checked, rebuild, rebuild_limit)
    if problems:
        raise RuntimeError("layout_invariant init cannot reproduce these initial values from train.seed (each "
                           "is named with its module; to keep the same initial model on every layout, draw them "
                           "with nn.init / Tensor.normal_ / uniform_ on the whole global tensor, or load them with "
                           "train.load_weight):\n  " + "\n  ".join(problems))
    keys = DrawKeys(checked, seed)
    redrawn = {}
    with flow.no_grad():
        for name, tensor, recipe in checked:
            tensor.copy_(seeded_values(recipe, keys, tensor))
            owners = sorted({keys.owner[id(draw)] for draw in recipe.draws()} - {name})
            redrawn[name] = recipe.describe() + (f" (follows {', '.join(owners)})" if owners else "")
    recorder.release()
    return redrawn


def build_with_seeded_init(build, seed, strict=True, rebuild_limit=None):
    """``build()`` a model whose random initial values depend on ``seed`` and names alone;
    returns ``(model, {name: recipe})``."""
    with recording_init() as recorder:
        model = build()
    return model, reinitialize(model, recorder, seed, strict, rebuild=build, rebuild_limit=rebuild_limit)
