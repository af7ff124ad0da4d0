"""Tokenizer files trained on a corpus, in the formats LiBai's tokenizers read.

* ``train_byte_bpe`` + ``write_gpt2_files``: a byte-level BPE that LiBai's ``GPT2Tokenizer`` loads unchanged
  (GPT-2's pre-tokens and byte alphabet; vocabulary: the 256 bytes, one entry per merge in order, ``<|endoftext|>``);
  ``write_roberta_files`` writes it in RoBERTa's layout for ``RobertaTokenizer``;
* ``wordpiece_vocab`` + ``write_wordpiece_vocab``: a ``vocab.txt`` for ``BertTokenizer`` with every character seen
  (alone and as a ``##`` continuation), so text made of them tokenizes without ``[UNK]``.

Both are deterministic: ties are broken by the symbols themselves.
"""
import collections
import json
import os
import unicodedata

import regex

# GPT-2's pre-tokenisation: contractions, runs of letters, of digits, of other symbols (each
# with at most one leading space), and whitespace.
GPT2_PRETOKENIZE = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
END_OF_TEXT = "<|endoftext|>"
BERT_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
MERGES_HEADER = "#version: 0.2"
# RoBERTa's vocab.json: these four take ids 0-3 (LiBai's RoBERTa pads with id 1), <mask> the last id.
ROBERTA_LEADING_TOKENS = ("<s>", "<pad>", "</s>", "<unk>")
ROBERTA_MASK = "<mask>"


def byte_alphabet():
    """``{byte: character}``: GPT-2's spelling of the 256 byte values as printable characters.

    Printable Latin-1 bytes stand for themselves; the other 68 (control characters, space, soft hyphen...) take the
    characters from U+0100 on, in byte order.  Ordered as GPT-2's vocabulary lists them: the printable ones first."""
    printable = [b for b in range(256) if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF]
    others = [b for b in range(256) if b not in set(printable)]
    alphabet = {b: chr(b) for b in printable}
    alphabet.update({b: chr(0x100 + n) for n, b in enumerate(others)})
    return alphabet


def spelled_pretokens(text, alphabet=None):
    """GPT-2's pre-tokens of ``text``, each spelled in the byte alphabet."""
    alphabet = byte_alphabet() if alphabet is None else alphabet
    return ["".join(alphabet[b] for b in piece.encode("utf-8")) for piece in GPT2_PRETOKENIZE.findall(text)]


class _PairCounts:
    """Adjacent-pair counts over a bag of words, updated word by word as merges apply."""

    def __init__(self, words, counts):
        self.words, self.counts = words, counts
        self.total = collections.Counter()
        self.where = collections.defaultdict(set)
        for index in range(len(words)):
            self._add(index, +1)

    def _add(self, index, sign):
        word, count = self.words[index], self.counts[index]
        for pair in zip(word, word[1:]):
            self.total[pair] += sign * count
            if sign > 0:
                self.where[pair].add(index)

    def best(self):
        """The most frequent pair (the smallest pair among equals), or None if none occurs twice."""
        top = max(self.total.values(), default=0)
        if top < 2:
            return None
        return min(pair for pair, count in self.total.items() if count == top)

    def merge(self, pair):
        joined = pair[0] + pair[1]
        for index in sorted(self.where.pop(pair, ())):
            word = self.words[index]
            if not any(p == pair for p in zip(word, word[1:])):
                continue  # an earlier merge in this word already used its symbols
            self._add(index, -1)
            merged, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
                    merged.append(joined)
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            self.words[index] = tuple(merged)
            self._add(index, +1)
        self.total = collections.Counter({p: c for p, c in self.total.items() if c > 0})


def train_byte_bpe(texts, num_merges):
    """``(vocab, merges)``: a byte-level BPE of ``num_merges`` merges (fewer if the corpus runs out of pairs that
    occur twice) learnt from ``texts``; ``vocab`` maps symbol to id, ``merges`` is in the order LiBai applies them."""
    alphabet = byte_alphabet()
    bag = collections.Counter()
    for text in texts:
        bag.update(spelled_pretokens(text, alphabet))
    words = sorted(bag)
    pairs = _PairCounts([tuple(w) for w in words], [bag[w] for w in words])
    merges = []
    while len(merges) < num_merges:
        pair = pairs.best()
        if pair is None:
            break
        pairs.merge(pair)
        merges.append(pair)
    symbols = list(alphabet.values()) + [a + b for a, b in merges] + [END_OF_TEXT]
    vocab = {}
    for symbol in symbols:
        vocab.setdefault(symbol, len(vocab))
    return vocab, merges


def write_gpt2_files(vocab, merges, folder):
    """``(vocab.json, merges.txt)`` paths, written in GPT-2's format."""
    os.makedirs(folder, exist_ok=True)
    vocab_path, merges_path = os.path.join(folder, "vocab.json"), os.path.join(folder, "merges.txt")
    with open(vocab_path, "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(merges_path, "w", encoding="utf-8") as f:
        # The reader drops the first line (the header) and the last (empty after the final newline).
        f.write(MERGES_HEADER + "\n" + "".join(f"{a} {b}\n" for a, b in merges))
    return vocab_path, merges_path


def roberta_vocab(gpt2_vocab):
    """A GPT-2 ``vocab.json`` mapping in RoBERTa's layout: ``ROBERTA_LEADING_TOKENS``, the BPE
    symbols in their order (GPT-2's ``<|endoftext|>`` left out: RoBERTa has no such token), then
    ``<mask>``."""
    symbols = [t for t, _ in sorted(gpt2_vocab.items(), key=lambda item: item[1]) if t != END_OF_TEXT]
    tokens = [*ROBERTA_LEADING_TOKENS, *symbols, ROBERTA_MASK]
    return {token: i for i, token in enumerate(tokens)}


def write_roberta_files(gpt2_vocab, merges, folder):
    """``(vocab.json, merges.txt)`` paths: ``roberta_vocab(gpt2_vocab)`` and the same merges."""
    return write_gpt2_files(roberta_vocab(gpt2_vocab), merges, folder)


def _is_punctuation(char):
    code = ord(char)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True  # BERT counts every non-alphanumeric ASCII symbol as punctuation
    return unicodedata.category(char).startswith("P")


def bert_words(text, lower_case=True):
    """The words BERT's basic tokenisation makes of ``text`` (lower-cased, accents stripped,
    split at whitespace and around each punctuation mark): what WordPiece then cuts up."""
    if lower_case:
        text = "".join(c for c in unicodedata.normalize("NFD", text.lower()) if unicodedata.category(c) != "Mn")
    words = []
    for chunk in text.split():
        current = ""
        for char in chunk:
            if _is_punctuation(char):
                words += [current, char] if current else [char]
                current = ""
            elif unicodedata.category(char) not in ("Cc", "Cf") and char != "\ufffd":
                current += char
        if current:
            words.append(current)
    return words


def wordpiece_vocab(texts, size, min_count=2, max_suffix=4):
    """A WordPiece vocabulary of at most ``size`` entries (at least the special tokens and the characters) for
    ``texts``; then whole words and ``##`` word endings (2 to ``max_suffix`` characters, counted over words not kept
    whole), most frequent first, each seen at least ``min_count`` times."""
    words = collections.Counter()
    for text in texts:
        words.update(bert_words(text))
    starts = sorted({w[0] for w in words})
    continuations = sorted({"##" + c for w in words for c in w[1:]})
    vocab = list(BERT_SPECIAL_TOKENS) + starts + continuations
    room = size - len(vocab)
    if room < 0:
        raise ValueError(f"wordpiece size {size} is smaller than the {len(vocab)} special tokens and characters")
    frequent = [w for w, c in sorted(words.items(), key=lambda wc: (-wc[1], wc[0])) if c >= min_count and len(w) > 1]
    whole = frequent[: room // 2 or room]
    kept = set(whole)
    endings = collections.Counter()
    for word, count in words.items():
        if word not in kept:
            for n in range(2, min(max_suffix, len(word) - 1) + 1):
                endings["##" + word[-n:]] += count
    suffixes = [s for s, c in sorted(endings.items(), key=lambda sc: (-sc[1], sc[0])) if c >= min_count]
    extra = whole + suffixes[: room - len(whole)]
    if len(extra) < room:  # few endings: fill with more whole words
        extra += frequent[len(whole): len(whole) + room - len(extra)]
    return vocab + extra


def write_wordpiece_vocab(tokens, folder):
    """``vocab.txt`` (one token per line, the id is the line number); returns its path."""
    os.makedirs(folder, exist_ok=True)
    if len(set(tokens)) != len(tokens):
        raise ValueError("wordpiece vocabulary has repeated tokens")
    path = os.path.join(folder, "vocab.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in tokens))
    return path
