"""Tensors computed from recorded random tensors while a model is built ("derivations").

``copy.deepcopy(student)``, ``w.clone()``, ``w * 0.5``, ``w[:4]``: each makes a new tensor out of random values, which
a recorder of draws alone would take for a constant that keeps OneFlow's values and stops matching its re-drawn
source. So the recorder watches out-of-place ops and sorts each op reading a random tensor (docs/init.md):

* copies (``clone``, ``copy.deepcopy``, ``copy_``/``load_state_dict``) share the source's recipe;
* exact derivations (``EXACT_METHODS``, ``EXACT_FUNCTIONS``: ops computing each element from the same elements on
  any layout) get a ``Derived`` recipe that re-runs the op on the re-drawn sources;
* everything else watched (``REFUSED_METHODS``, ``REFUSED_FUNCTIONS``: reductions, products, sorting, leaving the
  global view) marks its result, refused by ``param_init`` where it reaches a parameter or buffer: such an op adds in
  another order on another layout, and must not pass for a constant either.
"""
import oneflow as flow

# Out-of-place Tensor methods whose values come element by element from their inputs.
EXACT_METHODS = (
    "__getitem__", "view", "view_as", "reshape", "reshape_as", "flatten", "transpose", "swapaxes", "swapdims",
    "permute", "t", "narrow", "expand", "expand_as", "broadcast_to", "repeat", "tile", "unsqueeze", "squeeze",
    "flip", "roll", "chunk", "split", "unbind", "diagonal", "tril", "triu", "contiguous",
    "__mul__", "__rmul__", "__truediv__", "__rtruediv__", "__add__", "__radd__", "__sub__", "__rsub__",
    "__neg__", "__abs__", "__pow__", "__rpow__",
    "mul", "div", "add", "sub", "neg", "negative", "abs", "clamp", "clip", "clamp_min", "clamp_max", "pow",
    "square", "sqrt", "rsqrt", "reciprocal", "exp", "log", "erf", "erfinv", "sign", "sin", "cos", "tanh",
    "sigmoid", "relu", "floor", "ceil", "round", "trunc", "masked_fill", "where",
    "__gt__", "__ge__", "__lt__", "__le__", "__eq__", "__ne__", "gt", "ge", "lt", "le", "eq", "ne",
    "float", "double", "half", "bfloat16", "type_as", "cast")
# The same for functions of ``flow`` / ``flow._C`` (both names are patched where they exist).
EXACT_FUNCTIONS = (
    "cat", "concat", "stack", "hstack", "vstack", "reshape", "view", "transpose", "permute", "flatten", "narrow",
    "split", "chunk", "unbind", "squeeze", "unsqueeze", "expand", "tile", "repeat", "flip", "roll", "tril", "triu",
    "mul", "add", "sub", "div", "neg", "negative", "abs", "clamp", "clip", "pow", "sqrt", "rsqrt", "exp", "log",
    "erf", "erfinv", "sign", "tanh", "sigmoid", "relu", "where", "masked_fill", "cast", "tensor", "as_tensor",
    "gt", "ge", "lt", "le", "eq", "ne")
# Watched so that their results never pass for constants; refused where they reach the model.
REFUSED_METHODS = (
    "__matmul__", "__rmatmul__", "matmul", "mm", "bmm", "mv", "dot", "addmm", "sum", "mean", "std", "var",
    "norm", "prod", "cumsum", "cumprod", "softmax", "log_softmax", "logsumexp", "max", "min", "amax", "amin",
    "sort", "argsort", "topk", "median", "gather", "index_select", "masked_select", "nonzero", "unique",
    "to_local", "cpu", "cuda", "local_to_global", "global_to_global", "to_consistent", "as_strided", "unfold",
    "repeat_interleave", "inverse", "cross")
REFUSED_FUNCTIONS = (
    "matmul", "mm", "bmm", "einsum", "tensordot", "addmm", "sum", "mean", "std", "var", "norm", "prod",
    "cumsum", "softmax", "log_softmax", "logsumexp", "max", "min", "sort", "topk", "gather", "index_select",
    "to_local", "linear", "conv1d", "conv2d", "qr", "svd")
# ``t *= 2``: the in-place value op each in-place operator performs.
INPLACE_OPERATORS = {"__iadd__": "add_", "__isub__": "sub_", "__imul__": "mul_", "__itruediv__": "div_"}


class Input:
    """A random tensor an op read: its recipe as it was then (later in-place ops do not count)."""

    def __init__(self, recipe):
        self.recipe = recipe


class Constant:
    """A non-random tensor an op read, kept as it was then."""

    def __init__(self, tensor):
        with flow.no_grad():
            self.tensor = tensor.detach().clone()


def capture(value, recipe_of):
    """``value`` (an argument, possibly a list/tuple of tensors) with every tensor replaced by an
    ``Input`` (``recipe_of(tensor)`` is not None) or a ``Constant``."""
    if isinstance(value, flow.Tensor):
        recipe = recipe_of(value)
        return Input(recipe.copy()) if recipe is not None else Constant(value)
    if type(value) in (list, tuple) and any(isinstance(v, (flow.Tensor, list, tuple)) for v in value):
        return type(value)(capture(v, recipe_of) for v in value)
    return value


def _materialize(value, values_of):
    if isinstance(value, Input):
        return values_of(value.recipe)
    if isinstance(value, Constant):
        return value.tensor
    if type(value) in (list, tuple):
        return type(value)(_materialize(v, values_of) for v in value)
    return value


def _inputs(value):
    if isinstance(value, Input):
        yield value
    elif type(value) in (list, tuple):
        for v in value:
            yield from _inputs(v)


def tensors_in(values):
    """Every tensor in ``values`` (arguments), looking one level into lists and tuples."""
    for value in values:
        if isinstance(value, flow.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (v for v in value if isinstance(v, flow.Tensor))


class Derived:
    """The root of a recipe that is an exact op on other recipes: ``fn(*args, **kwargs)[index]``."""

    def __init__(self, name, fn, args, kwargs, index, site):
        self.name, self.fn, self.args, self.kwargs, self.index, self.site = name, fn, args, kwargs, index, site

    def inputs(self):
        """The recipes it reads, in argument order."""
        return [i.recipe for i in _inputs((self.args, tuple(self.kwargs.values())))]

    def compute(self, values_of):
        """The op on ``values_of(recipe)`` of every input (fresh tensors the caller may change)."""
        kwargs = {name: _materialize(value, values_of) for name, value in self.kwargs.items()}
        result = self.fn(*_materialize(self.args, values_of), **kwargs)
        return result if self.index is None else result[self.index]

    def describe(self):
        inputs = ", ".join(recipe.describe() for recipe in self.inputs())
        return f"{self.name}({inputs})" + ("" if self.index is None else f"[{self.index}]")
