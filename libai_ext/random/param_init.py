"""Initial weights from the seed alone: ``train.randomness="layout_invariant"``.

After a model was built inside ``recording_init`` (``init_recipes``), every parameter and
buffer whose value came from a random draw is drawn again from the counter-based stream of
``counter_rng``, keyed by ``(seed, "param_init", qualified name)`` and each element's *global*
index, with the distribution the model's code asked for, then the recorded ops are replayed.
The value then depends on nothing else: not the layout (1 rank or any dp x tp x pp), not
the build order, not OneFlow's generator, and no asynchronous local init can race.

Each rank computes only its own shards (plus the replicated tensors of its stage), as
OneFlow's own init does; the float64 intermediates of one tensor are the extra memory.

Refused, naming the tensor: draws the recorder cannot reproduce (``randint``, ``orthogonal_``,
per-shard init, in-place ops mixing random tensors), a replay that does not give back the
value the model's code produced (an op the recorder missed), and (``strict``) random draws
that reached no parameter or buffer, which an untracked copy may have carried into one.
"""
import numpy as np
import oneflow as flow

from .counter_rng import counter_normal, counter_unit, derive_keys
from .init_recipes import LAYOUT_OPS, recording_init

_STREAM = "param_init"


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


def _local(tensor):
    tensor = tensor.detach()
    return tensor.to_local() if tensor.is_global else tensor


def _replay_matches(recipe, tensor):
    """Replaying the recorded ops on the drawn copy gives ``tensor``'s value (this rank's part)."""
    replayed = _replay(recipe, recipe.raw.clone(), with_layout=True)
    if (replayed.is_global != tensor.is_global or tuple(replayed.shape) != tuple(tensor.shape)
            or replayed.dtype != tensor.dtype):
        return False
    if tensor.is_global and (replayed.placement != tensor.placement or replayed.sbp != tensor.sbp):
        return False
    return np.array_equal(_local(replayed).numpy(), _local(tensor).numpy())


def _sum_over_ranks(counts):
    """Element-wise sum of an int vector over all ranks (every rank must call it)."""
    counts = np.asarray(counts, dtype=np.int64)
    world = flow.env.get_world_size()
    if world == 1 or not counts.size:
        return counts
    placement = flow.placement("cpu", list(range(world)))
    summed = flow.tensor(counts).to_global(placement=placement, sbp=flow.sbp.partial_sum)
    return summed.to_global(sbp=flow.sbp.broadcast).to_local().numpy()


def seeded_values(recipe, name, seed, like):
    """``recipe``'s draw for the tensor called ``name``, laid out like ``like``, ops replayed."""
    keys = [derive_keys(seed, _STREAM, name, stream) for stream in range(2)]
    layout = dict(placement=like.placement, sbp=like.sbp) if like.is_global else dict(device=like.device)
    shape = tuple(like.shape)
    if recipe.kind == "uniform":
        low, high = recipe.args
        values = low + (high - low) * counter_unit(shape, keys[0], **layout)
    else:
        mean, std = recipe.args
        values = mean + std * counter_normal(shape, keys, **layout)
    # The model's ops ran on the drawn dtype: replay them on it, as they were.
    return _replay(recipe, values.to(recipe.raw.dtype), with_layout=False).to(like.dtype)


def _problems(named, recorder, strict):
    """What cannot be re-drawn faithfully, as messages (the same on every rank)."""
    problems, checked = [], []
    for name, tensor in named:
        storage = recorder.lookup(tensor)
        if storage is None or not storage.random:
            continue
        if storage.unsupported is not None:
            problems.append(f"{name}: {storage.unsupported}")
        elif tensor.is_global and flow.sbp.partial_sum in tensor.sbp:
            problems.append(f"{name}: a partial-sum tensor drawn at {storage.recipe.site}")
        elif tuple(tensor.shape) != storage.recipe.shape:
            problems.append(f"{name}: drawn with shape {storage.recipe.shape}, now {tuple(tensor.shape)}")
        else:
            checked.append((name, tensor, storage.recipe))
    mismatched = _sum_over_ranks([not _replay_matches(recipe, tensor) for _, tensor, recipe in checked])
    problems += [f"{name}: replaying {recipe.describe()} (drawn at {recipe.site}) does not give its value: "
                 f"an in-place op the recorder does not watch changed it"
                 for (name, _, recipe), bad in zip(checked, mismatched) if bad]
    if strict:
        reached = {id(recorder.lookup(tensor)) for _, tensor in named}
        stray = sorted({(s.recipe.site if s.recipe is not None else s.unsupported) for s in recorder.storages()
                        if s.random and not s.consumed and id(s) not in reached})
        problems += [f"a random draw that reached no parameter or buffer by a tracked path: {site}"
                     for site in stray]
    return problems, checked


def reinitialize(model, recorder, seed, strict=True):
    """Re-draw every randomly initialised parameter/buffer of ``model`` from ``seed``; returns
    ``{name: recipe description}`` of what was re-drawn.  Every rank must call it.

    Raises ``RuntimeError`` (before changing anything) listing every tensor it cannot
    reproduce.  ``strict=False`` tolerates random draws that reached no tensor of the model.
    """
    named = named_tensors(model)
    problems, checked = _problems(named, recorder, strict)
    if problems:
        raise RuntimeError("layout_invariant init cannot reproduce these initial values from the seed "
                           "(use train.randomness='fast', or initialise them with nn.init / Tensor.normal_ "
                           "/ uniform_ on the whole global tensor):\n  " + "\n  ".join(problems))
    redrawn = {}
    with flow.no_grad():
        for name, tensor, recipe in checked:
            tensor.copy_(seeded_values(recipe, name, seed, tensor))
            redrawn[name] = recipe.describe()
    recorder.release()
    return redrawn


def build_with_seeded_init(build, seed, strict=True):
    """``build()`` a model whose random initial values depend on ``seed`` and names alone;
    returns ``(model, {name: recipe})``."""
    with recording_init() as recorder:
        model = build()
    return model, reinitialize(model, recorder, seed, strict)
