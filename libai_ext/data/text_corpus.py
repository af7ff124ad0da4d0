"""A corpus of real English prose that every installation already has: no download.

The sources: scikit-learn's dataset descriptions (``sklearn/datasets/descr/*.rst``) and CPython's reference
documentation (``pydoc_data.topics``, what ``help()`` shows).  ``corpus_paragraphs`` keeps their prose paragraphs in
a fixed order; ``split_sentences`` cuts one into sentences for BERT's sentence pairs.  The text depends on both
packages' installed versions: ``corpus_digest`` names what was read.
"""
import glob
import hashlib
import os
import re

MIN_WORDS = 8          # shorter blocks are headings, captions or list items
MIN_LETTER_SHARE = 0.6  # of the non-blank characters: prose, not numbers, tables or code
MAX_CODE_SHARE = 0.04   # of the non-blank characters that code is made of (= ( ) [ ] { } _ ;)

_RULE = re.compile(r"^[=*\-~^#+.` ]{3,}$")                    # RST under/overlines, table borders
_ROLE = re.compile(r":[\w:+-]+:`([^`<]*?)\s*(?:<[^`>]*>)?`")   # :ref:`text <target>` -> text
_LINK = re.compile(r"`([^`<]+?)\s*(?:<[^`>]*>)?`_{1,2}")       # `text <url>`_ -> text
_LITERAL = re.compile(r"``([^`]*)``")
_EMPHASIS = re.compile(r"(?<!\w)\*{1,2}([^*\s][^*]*?)\*{1,2}(?!\w)")
# A sentence ends at . ! or ? (closing quotes/brackets allowed) before a capital or an opening
# quote/bracket; the look-behind keeps common abbreviations and initials inside their sentence.
_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\betc)(?<!\bvs)(?<!\bDr)(?<!\bMr)(?<!\bal)(?<!\bNo)"
                           r"(?<!\b[A-Z])([.!?][\"')\]]*)\s+(?=[\"'(\[]?[A-Z])")


def sklearn_descriptions():
    """``[(name, text)]`` of scikit-learn's dataset descriptions, sorted by file name."""
    import sklearn.datasets

    folder = os.path.join(os.path.dirname(sklearn.datasets.__file__), "descr")
    paths = sorted(glob.glob(os.path.join(folder, "*.rst")))
    return [(f"sklearn/datasets/descr/{os.path.basename(p)}", _read(p)) for p in paths]


def python_reference_topics():
    """``[(name, text)]`` of CPython's reference documentation topics, sorted by topic
    (empty where a distribution strips ``pydoc_data``)."""
    try:
        from pydoc_data.topics import topics
    except ImportError:
        return []
    return [(f"pydoc_data.topics[{key!r}]", topics[key]) for key in sorted(topics)]


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def default_sources():
    return sklearn_descriptions() + python_reference_topics()


def clean_markup(text):
    """Plain text of a line of reStructuredText: roles, links, literals and emphasis unwrapped."""
    for pattern in (_ROLE, _LINK, _LITERAL, _EMPHASIS):
        text = pattern.sub(r"\1", text)
    return re.sub(r"\s+", " ", text).strip()


_BULLET = re.compile(r"^(?:[-*+•]|\d+[.)])\s+")


def _prose_text(lines):
    """The text of a block if it is a prose paragraph (a bullet item counts, without its
    bullet), else None: headings, rules, tables, field lists, directives and code are not."""
    indents = {len(line) - len(line.lstrip()) for line in lines}
    if len(indents) > 1 and not _BULLET.match(lines[0].lstrip()):
        return None  # ragged indentation: code, a table or a nested structure
    stripped = [line.strip() for line in lines]
    if any(_RULE.match(line) for line in stripped):
        return None  # a table border or a heading's rule
    first = _BULLET.sub("", stripped[0])
    if first.startswith(("..", ":", ">>>", "|", "$")) or any("::=" in line for line in stripped):
        return None  # directive, field list, prompt, line block, grammar
    text = " ".join([first] + stripped[1:])
    visible = [c for c in text if not c.isspace()]
    letters = sum(c.isalpha() for c in visible)
    code = sum(c in "=()[]{}_;" for c in visible)
    if len(text.split()) < MIN_WORDS or letters < MIN_LETTER_SHARE * len(visible) or code > MAX_CODE_SHARE * len(
            visible):
        return None
    if not (first[:1].isalpha() or first[:1] in "\"'(") or not re.search(r"[.!?:][\"')\]]*$", text):
        return None  # prose starts with a word and ends a sentence
    return text


def paragraphs_of(text):
    """The prose paragraphs of one document (blocks separated by blank lines), markup removed."""
    blocks, current = [], []
    for line in text.splitlines():
        if line.strip():
            current.append(line.rstrip())
        elif current:
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    texts = (_prose_text(block) for block in blocks)
    return [clean_markup(text) for text in texts if text is not None]


def corpus_paragraphs(sources=None, max_chars=None):
    """Prose paragraphs of ``sources`` (default: ``default_sources()``), in order, as
    ``[(source name, paragraph)]``; stops before ``max_chars`` characters of text."""
    sources = default_sources() if sources is None else sources
    out, total = [], 0
    for name, text in sources:
        for paragraph in paragraphs_of(text):
            if max_chars is not None and total + len(paragraph) > max_chars:
                return out
            out.append((name, paragraph))
            total += len(paragraph)
    return out


def split_sentences(paragraph):
    """The sentences of a paragraph (a rule-based splitter: no model, no download)."""
    marked = _SENTENCE_END.sub(lambda m: m.group(1) + "\n", paragraph)
    return [s.strip() for s in marked.split("\n") if s.strip()]


def corpus_digest(paragraphs):
    """A short hash of the corpus text, to tell whether a built folder matches it."""
    h = hashlib.sha256()
    for _, paragraph in paragraphs:
        h.update(paragraph.encode("utf-8") + b"\n")
    return h.hexdigest()[:16]
