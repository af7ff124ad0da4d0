"""Which draw a stochastic layer makes: ``(step, call)``, and where its rows sit in the step.

Under ``ConsistentBatchTrainer`` every micro-step runs inside ``drawing_step``: a layer's ``j``-th
call in that micro-batch draws with keys ``(train.seed, layer name, global step, j)`` and numbers
its elements by their global position in the step's batch (``global_index.StepRows``).  So the
masks of global step ``t`` are the same on 1 rank with the whole global batch, under data
parallelism, and under gradient accumulation in eager and graph mode; a resumed run draws them
again from the iteration alone.

Outside a step (a model run by user code) each layer counts its own calls instead: the
``c``-th call draws ``(c, 0)``.

Inside ``nn.Graph`` the step and micro-batch are tensors the graph takes as an input
(``libai_ext.random.layers.graph_calls``); ``GraphStep`` carries them while the graph traces.
"""
import contextlib
import itertools

from .global_index import StepRows

_tokens = itertools.count()
_current = None


class Step:
    """One micro-step: ``step`` (int, or int32 tensor in a graph), micro-batch ``micro`` of
    ``micro_batches``, the batch split over ``data_parallel`` ranks.  ``batch_rows``: the rows of
    one micro-batch's global batch, and ``data_parallel_rank`` this rank's block of them, where the
    trainer knows them (draws on local tensors inside a forward need them: ``forward_draws``)."""

    def __init__(self, step, micro=0, micro_batches=1, data_parallel=1, batch_rows=None, data_parallel_rank=0):
        if isinstance(step, int) and step < 0:
            raise ValueError(f"step must be non-negative, got {step}")
        self.step, self.micro = step, micro
        self.micro_batches, self.data_parallel = int(micro_batches), int(data_parallel)
        self.batch_rows = None if batch_rows is None else int(batch_rows)
        self.data_parallel_rank = int(data_parallel_rank)
        self.token = next(_tokens)  # layers restart their call count when it changes

    def rows(self):
        """How dim 0 sits in the step (None without accumulation: the tensor's own rows)."""
        if self.micro_batches == 1:
            return None
        return StepRows(self.micro_batches, self.micro)


@contextlib.contextmanager
def drawing_step(step, micro=0, micro_batches=1, data_parallel=1, batch_rows=None, data_parallel_rank=0):
    """Stochastic layers called inside draw the masks of this (micro-)step."""
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
        self._own_calls, self._token, self._calls = 0, None, 0

    def next(self):
        step = current_step()
        if step is None:
            self._own_calls += 1
            return self._own_calls - 1, 0, None
        if self._token != step.token:
            self._token, self._calls = step.token, 0
        self._calls += 1
        return step.step, self._calls - 1, step
