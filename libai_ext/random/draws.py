"""The step object: the state of one training micro-step that every draw of it is keyed by.

A ``Step`` holds the seed and mode (``train.seed``, ``train.randomness``), the global optimizer step, the micro-batch
``micro`` of ``micro_batches`` and the layout (``data_parallel``, ``data_parallel_rank``, ``batch_rows`` of a
micro-batch's global batch). A draw's keys derive from its ``hashed`` step key (``keys.step_key``), the stream's words
and the call (``Step.draw``), so step ``t``'s masks are the same on every layout and a resume draws them again
(docs/randomness.md).

``ConsistentBatchTrainer.run_step`` passes the step to ``get_batch`` (mixup); a forward cannot take it, so while the
step runs it is the current one (``drawing_step``, ``current_step``): a layer's ``j``-th call draws ``(step, j)``,
rows numbered by their place in the step's batch (``global_index.StepRows``). Outside a step each layer counts its own
calls (the ``c``-th draws ``(c, 0)``). Inside ``nn.Graph`` the step key and micro-batch are graph inputs
(``libai_ext.random.layers.graph_calls``).
"""
import contextlib
import itertools

from . import modes
from .counter_rng import call_keys, stream_words
from .keys import step_key
from .global_index import StepRows

_tokens = itertools.count()
_current = None


class Step:
    """One micro-step (see the module's doc).  ``step`` and ``micro`` are ints, or int32 tensors inside a graph,
    where ``hashed`` (the step key's two words, tensors too) is given; ``seed`` and ``mode`` default to what
    ``seed_everything`` set."""

    def __init__(self, step, micro=0, micro_batches=1, data_parallel=1, batch_rows=None, data_parallel_rank=0,
                 seed=None, mode=None, hashed=None):
        if isinstance(step, int) and step < 0:
            raise ValueError(f"step must be non-negative, got {step}")
        # (the run's seed and mode read from ``modes`` directly: a Step is made at every micro-step)
        self.seed = modes._layer_seed if seed is None else int(seed)
        self.mode = modes._randomness if mode is None else modes.check_randomness(mode)
        self.step, self.micro = step, micro
        self.micro_batches, self.data_parallel = int(micro_batches), int(data_parallel)
        self.batch_rows = None if batch_rows is None else int(batch_rows)
        self.data_parallel_rank = int(data_parallel_rank)
        self.hashed = step_key(self.seed, step) if hashed is None else hashed
        self.rows = None if self.micro_batches == 1 else StepRows(self.micro_batches, micro)  # dim 0 in the step
        self.token = next(_tokens)
        self._calls = {}

    def next_call(self, owner):
        """The index of ``owner``'s next draw in this micro-step (0, 1, ...)."""
        call = self._calls.get(owner, 0)
        self._calls[owner] = call + 1
        return call

    def draw(self, owner, stream):
        """``(call, keys)`` of ``owner``'s next draw from ``stream``."""
        call = self._calls.get(owner, 0)  # (``next_call``, inlined: every eager mask asks)
        self._calls[owner] = call + 1
        return call, call_keys(stream_words(self.seed, stream), self.hashed, call)


@contextlib.contextmanager
def drawing_step(step, micro=0, micro_batches=1, data_parallel=1, batch_rows=None, data_parallel_rank=0):
    """Stochastic layers called inside draw the masks of this (micro-)step; yields the ``Step``."""
    global _current
    previous, _current = _current, Step(step, micro, micro_batches, data_parallel, batch_rows, data_parallel_rank)
    try:
        yield _current
    finally:
        _current = previous


def current_step():
    """The ``Step`` being run, or None outside the trainer."""
    return _current


class CallCounter:
    """Which draw a stream's call makes: ``(step, call, Step or None)``, the ``call``-th of the current
    micro-step, or ``(c, 0, None)`` for its ``c``-th call outside any step."""

    def __init__(self):
        self._own_calls = 0

    def next(self):
        step = _current
        if step is None:
            self._own_calls += 1
            return self._own_calls - 1, 0, None
        return step.step, step.next_call(self), step
