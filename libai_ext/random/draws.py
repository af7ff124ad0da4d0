"""The step object, the state of one training micro-step, and the one key function every draw derives its key from.

A ``Step`` holds the seed and mode (``train.seed``, ``train.randomness``), the global optimizer step, the micro-batch
``micro`` of ``micro_batches`` and the layout (``data_parallel``, ``data_parallel_rank``, ``batch_rows`` of a
micro-batch's global batch). A draw's keys derive from its ``hashed`` step key (``step_key``), the stream's words and
the call (``Step.next_call``; ``counter_rng.call_keys``), so step ``t``'s masks are the same on every layout and a
resume draws them again (docs/randomness.md).

``key(seed, what, counters...)`` is blake2b of the words' ``repr``, as many bits as the draw needs, so two draws share
a key only when they name the same words. It keys the data order (``global_order``: ``key(seed, "order", epoch)``), a
sample's and a batch's ``collate_fn`` seeds (``keyed_dataset``), a step's mixup (``global_mixup``), the counter hash's
words and the step key a layer's draw derives from (``counter_rng``, ``step_key``), the "fast" mode's shard generators
(``shard_rng``) and the per-scope seeds (``seeding``).

``ConsistentBatchTrainer.run_step`` passes the step to ``get_batch`` (mixup); a forward cannot take it, so while the
step runs it is the current one (``drawing_step``, ``current_step``): a layer's ``j``-th call draws ``(step, j)``,
rows numbered by their place in the step's batch (``global_index.StepRows``). Outside a step each layer counts its own
calls (the ``c``-th draws ``(c, 0)``). Inside ``nn.Graph`` the step key and micro-batch are graph inputs
(``libai_ext.random.layers.graph_calls``).
"""
import contextlib
import hashlib
import itertools

from . import modes
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


_MAX_BITS = 8 * hashlib.blake2b().digest_size


def key(*words, bits=64):
    """A non-negative int of ``bits`` bits (a multiple of 8, at most 512) from any words with a stable ``repr``
    (ints, strings, tuples of them)."""
    if bits % 8 or not 8 <= bits <= _MAX_BITS:
        raise ValueError(f"a key has a multiple of 8 bits, 8 to {_MAX_BITS}; got {bits}")
    digest = hashlib.blake2b(repr(words).encode(), digest_size=bits // 8).digest()
    return int.from_bytes(digest, "little")


def key_words(*words, count, bits=32):
    """``count`` words of ``bits`` bits each, from one ``key`` of ``count * bits`` bits (least significant first)."""
    value, mask = key(*words, bits=count * bits), (1 << bits) - 1
    return [(value >> (bits * i)) & mask for i in range(count)]


def step_key(seed, step):
    """The step's key: two odd words of ``key(seed, "step", step)`` as signed int32, from which every draw of the
    step derives its counter keys ``C`` and ``a`` (``counter_rng.call_keys``; a graph takes them as an input)."""
    value = key(int(seed), "step", int(step))
    low, high = (value | 1) & 0xFFFFFFFF, ((value >> 32) | 1) & 0xFFFFFFFF  # (no helper: made at every micro-step)
    return low - (low >> 31 << 32), high - (high >> 31 << 32)
