"""Special tokens a LiBai tokenizer declares but its vocabulary file lacks (T5's), counted before
the model's vocabulary is sized.

LiBai's T5 configs give a ``BertTokenizer`` ``[BOS]``, ``[EOS]`` and 100 sentinels ``<extra_id_i>``, none in a BERT
vocabulary file; a declared token gets an id only once ``add_tokens`` adds it (docs/upstream-bugs.md #22). LiBai
0.1.1 never adds them: all encode as ``[UNK]`` (every masked span the same token, the decoder starting and ending on
``[UNK]``). Main's ``T5Dataset`` adds them after ``DefaultTrainer.build_tokenizer`` sized the vocabulary from
``len(tokenizer)``: their ids lie past the counted tokens, and past the embedding's rows unless the padding covers them.

``apply()`` wraps LiBai's ``build_tokenizer`` so that its tokenizer already holds every token it declares: the size
counts them on both lines, and main's own ``add_tokens`` then adds nothing. A tokenizer missing none (GPT-2's, BERT's)
is returned untouched, as is any this repair cannot read and extend, whatever its class: one without LiBai's
``special_tokens_map``, ``get_vocab`` and ``add_tokens`` (e.g. Llama's and Baichuan's SentencePiece tokenizers,
whose ``get_vocab`` calls a method they lack).
"""
import functools
import logging

from .patching import replace

# Where LiBai's trainer and user scripts reach the function (the same object on both lines).
_MODULES = ("libai.tokenizer.build", "libai.tokenizer", "libai.engine.default")


def declared_special_tokens(tokenizer):
    """The special tokens ``tokenizer`` declares, in LiBai's attribute order (bos, eos, unk, sep, pad,
    cls, mask, then the additional ones in their given order).  Not ``all_special_tokens``: LiBai
    builds it through a ``set``, whose order follows each process's string hash seed, so the ids
    added from it would differ from rank to rank."""
    tokens = []
    for value in tokenizer.special_tokens_map.values():
        tokens.extend(value if isinstance(value, (list, tuple)) else [value])
    return list(dict.fromkeys(str(t) for t in tokens if t))


def missing_special_tokens(tokenizer):
    """Declared special tokens that the vocabulary does not hold: each one encodes as ``[UNK]``."""
    vocab = tokenizer.get_vocab()
    return [t for t in declared_special_tokens(tokenizer) if t not in vocab]


def repairable(tokenizer):
    """Whether ``tokenizer`` has what this repair reads and calls: LiBai's ``special_tokens_map``, a
    ``get_vocab`` that answers, and ``add_tokens``."""
    if not (hasattr(tokenizer, "special_tokens_map") and callable(getattr(tokenizer, "get_vocab", None))
            and callable(getattr(tokenizer, "add_tokens", None))):
        return False
    try:
        tokenizer.get_vocab()
    except Exception as error:  # a vocabulary it cannot list: nothing to compare the declared tokens with
        logging.getLogger(__name__).info("libai_ext: %s.get_vocab() fails (%s: %s); its special tokens are left "
                                         "as the tokenizer has them", type(tokenizer).__name__,
                                         type(error).__name__, error)
        return False
    return True


def add_missing_special_tokens(tokenizer):
    """Adds ``missing_special_tokens(tokenizer)`` to its vocabulary, ids after the file's in declared
    order (for T5: ``[BOS]``, ``[EOS]``, ``<extra_id_0>``... as LiBai main's ``T5Dataset`` numbers
    them); returns them.  A tokenizer that is not ``repairable`` is left as it is (returns ``[]``)."""
    if not repairable(tokenizer):
        return []
    missing = missing_special_tokens(tokenizer)
    if missing:
        tokenizer.add_tokens(missing, special_tokens=True)
    still = missing_special_tokens(tokenizer)
    if still:
        raise ValueError(f"tokenization.tokenizer: {type(tokenizer).__name__} could not add its special tokens "
                         f"{still[:5]} to its vocabulary")
    return missing


def _with_special_tokens(build_tokenizer):
    @functools.wraps(build_tokenizer)
    def build_tokenizer_with_special_tokens(cfg, *args, **kwargs):
        tokenizer = build_tokenizer(cfg, *args, **kwargs)
        add_missing_special_tokens(tokenizer)
        return tokenizer

    build_tokenizer_with_special_tokens.libai_original = build_tokenizer
    return build_tokenizer_with_special_tokens


def apply():
    """Wraps LiBai's ``build_tokenizer`` under every name it is reached by; idempotent."""
    import importlib

    original = importlib.import_module(_MODULES[0]).build_tokenizer
    original = getattr(original, "libai_original", original)
    wrapped = _with_special_tokens(original)
    for name in _MODULES:
        module = importlib.import_module(name)
        if getattr(module, "build_tokenizer", None) is original:
            replace(module, "build_tokenizer", wrapped,
                    "declared special tokens (T5's) join the vocabulary before its size is fixed", patch="special_tokens")  # noqa: E501
