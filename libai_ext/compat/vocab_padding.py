"""One vocabulary size on every layout: LiBai pads it for the tensor-parallel size of the run.

Both LiBai lines set ``model.cfg.vocab_size`` in ``DefaultTrainer.build_tokenizer`` to the tokenizer's length rounded
up to a multiple of ``make_vocab_size_divisible_by x tensor_parallel_size``: each tp gets another model shape (extra
rows with their own initial values, whose logits enter the softmax), so tp2 trains another model than tp1 and a
checkpoint loads on its own tp only. Under ``train.randomness="layout_invariant"`` the padding is for
``tokenization.max_tensor_parallel_size`` (default ``DEFAULT_MAX_TP``), the size LiBai gives at that tp, on every tp
dividing it; another tp keeps LiBai's padding, with a warning naming the key (docs/usage.md, docs/layout_invariance.md).
"""
import logging

from libai.config import try_get_key

logger = logging.getLogger(__name__)

KEY = "tokenization.max_tensor_parallel_size"
DIVISOR_KEY = "tokenization.make_vocab_size_divisible_by"
DEFAULT_MAX_TP = 8  # the GPUs of one node: the largest tensor-parallel group LiBai's own configs use


def round_up(size, multiple):
    return -(-int(size) // int(multiple)) * int(multiple)


def max_tensor_parallel_size(cfg):
    """``tokenization.max_tensor_parallel_size``, checked (a positive int)."""
    value = try_get_key(cfg, KEY, default=None)
    value = DEFAULT_MAX_TP if value is None else value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{KEY} must be an int >= 1 (the largest tensor-parallel size the model is trained on), "
                         f"got {value!r}")
    return value


def padded_vocab_size(tokens, divisible_by, tensor_parallel_size, max_tp):
    """``(rows, layout_invariant)``: the padded vocabulary for ``tokens`` and whether it is the same on
    every tensor-parallel size dividing ``max_tp`` (else LiBai's padding for this tp)."""
    if max_tp % tensor_parallel_size == 0:
        return round_up(tokens, divisible_by * max_tp), True
    return round_up(tokens, divisible_by * tensor_parallel_size), False


def pad_vocabulary(cfg, tokenizer):
    """Set ``model.cfg.vocab_size`` to the layout-invariant padding where LiBai padded it; returns it.

    Call after LiBai's ``build_tokenizer`` (which set LiBai's padding); does nothing where LiBai
    did not pad (no tokenizer, no ``model.cfg.vocab_size``, a tokenizer without ``padded_vocab_size``).
    """
    if tokenizer is None or not hasattr(tokenizer, "padded_vocab_size") or \
            try_get_key(cfg, "model.cfg.vocab_size", default=None) is None:
        return None
    divisible_by = int(try_get_key(cfg, DIVISOR_KEY, default=1) or 1)
    tp = int(try_get_key(cfg, "train.dist.tensor_parallel_size", default=1) or 1)
    max_tp = max_tensor_parallel_size(cfg)
    rows, invariant = padded_vocab_size(len(tokenizer), divisible_by, tp, max_tp)
    if not invariant:
        logger.warning(
            f"{KEY}={max_tp} is not a multiple of train.dist.tensor_parallel_size={tp}: the vocabulary of "
            f"{len(tokenizer)} tokens is padded to {rows} rows as LiBai pads it for this tp, so this layout trains "
            f"another model (another embedding shape) than other tensor-parallel sizes; set {KEY} to a multiple of "
            f"every tensor-parallel size the model is trained on (e.g. {KEY}={tp * max_tp})")
    elif rows != cfg.model.cfg.vocab_size:
        logger.info(f"vocabulary of {len(tokenizer)} tokens padded to {rows} rows ({DIVISOR_KEY}={divisible_by} x "
                    f"{KEY}={max_tp}) on every tensor-parallel size dividing {max_tp}; LiBai pads it to "
                    f"{cfg.model.cfg.vocab_size} at tp={tp}")
    cfg.model.cfg.vocab_size = rows
    return rows
