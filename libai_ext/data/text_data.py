"""Real text for LiBai's GPT-2, BERT, T5 and RoBERTa pretraining, built offline with LiBai's own preprocess tool.

``ensure_text_data(root)`` writes, once, into ``root`` (``FILES``): the corpus (``text_corpus``) as documents and as
sentences; a byte-level BPE in GPT-2's and RoBERTa's layouts and a WordPiece vocabulary trained on it
(``tokenizer_training``); LiBai's indexed datasets of the documents (GPT-2), of the sentences by ``BertTokenizer``
(BERT, T5) and by ``GPT2Tokenizer`` on RoBERTa's files (LiBai 0.1.1 has no ``RobertaTokenizer``; both give the same
ids); and, last, ``MANIFEST.json``: what was built, from what, with which settings.

BERT's sentence pairs (and T5's, RoBERTa's sequences) need documents of several sentences, which the tool makes only
with ``--split-sentences``: NLTK's Punkt model, downloaded at run time.  So the tool runs over one sentence per line
and ``group_into_documents`` rewrites the index alone, with LiBai's own writer: the same tokens, document boundaries
back at the source documents.

The tool comes from a LiBai source tree or archive (``libai_source``; LiBai main's works with either LiBai line, to
the same bytes), extracted to a temporary folder.  A build takes about half a minute, under a file lock so that the
ranks of a launch wait for one builder.
"""
import contextlib
import fcntl
import glob
import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

import numpy as np

from .text_corpus import corpus_digest, corpus_paragraphs, split_sentences
from .tokenizer_training import (
    train_byte_bpe, wordpiece_vocab, write_gpt2_files, write_roberta_files, write_wordpiece_vocab,
)

logger = logging.getLogger(__name__)

DEFAULT_ROOT = "./data/libai_text"
MANIFEST = "MANIFEST.json"
TOOL = "tools/preprocess_data.py"
LIBAI_SOURCE_ENV = "LIBAI_MAIN_ARCHIVE"  # the Makefile's name for LiBai main's source archive
LIBAI_MAIN_COMMIT = "9dcbe3b281c98ba9a3bd192495bef42570095336"  # the Makefile's pin
LIBAI_SOURCE_URL = f"https://github.com/Oneflow-Inc/libai/archive/{LIBAI_MAIN_COMMIT}.tar.gz"
DOWNLOAD_TIMEOUT_S = 120
# Set by oneflow.distributed.launch in each rank: a tool started from a rank with them would join
# (and block) that rank's job when it imports OneFlow.
LAUNCH_ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK")
TOOL_TIMEOUT_S = 900
# Vocabularies of 1024 (256 bytes + 767 merges + <|endoftext|>) and 2048 entries: LiBai pads the
# vocabulary to a multiple of make_vocab_size_divisible_by x tensor-parallel size, so with 128
# the model is the same for tp = 1, 2, 4 and 8 (another size would grow the embedding with tp).
DEFAULT_SETTINGS = dict(bpe_merges=767, wordpiece_size=2048, max_chars=None)

# What each configuration reads, relative to the root.
FILES = {
    "gpt2_vocab": "gpt2/vocab.json",
    "gpt2_merges": "gpt2/merges.txt",
    "bert_vocab": "bert/vocab.txt",
    "roberta_vocab": "roberta/vocab.json",
    "roberta_merges": "roberta/merges.txt",
    "gpt2_prefix": "gpt2_text_document",
    "bert_prefix": "bert_text_sentence",
    "roberta_prefix": "roberta_text_sentence",
    "documents": "corpus/documents.jsonl",
    "sentences": "corpus/sentences.jsonl",
}


class TextDataError(RuntimeError):
    """The text data cannot be built, or a folder holds something else."""


def default_libai_source():
    """LiBai main's source archive: ``$LIBAI_MAIN_ARCHIVE``, else where this repository's Makefile
    looks for it (``../shared/vendor/libai-main-*.tar.gz`` beside this checkout or beside the local
    checkout it was cloned from), else the copy ``fetch_libai_source`` cached; None if absent."""
    if os.environ.get(LIBAI_SOURCE_ENV):
        return os.environ[LIBAI_SOURCE_ENV]
    found = vendor_archive("libai-main-*.tar.gz")
    if found:
        return found
    cached = cached_libai_source()
    return cached if os.path.isfile(cached) else None


def vendor_archive(pattern):
    """The newest archive named ``pattern`` in ``../shared/vendor`` beside this checkout or beside the local
    checkout it was cloned from (where this repository's Makefile and CI keep LiBai's archives), or None."""
    repository = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for folder in (repository, _cloned_from(repository)):
        found = sorted(glob.glob(os.path.join(folder, "..", "shared", "vendor", pattern))) if folder else []
        if found:
            return os.path.abspath(found[-1])
    return None


def _cloned_from(repository):
    """The local folder git's ``origin`` of ``repository`` names (a clone of a local checkout), or None."""
    try:
        url = subprocess.run(["git", "-C", repository, "config", "--get", "remote.origin.url"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    url = url[len("file://"):] if url.startswith("file://") else url
    return url if url and os.path.isdir(url) else None


def cached_libai_source():
    """Where ``fetch_libai_source`` keeps LiBai main's archive: ``$XDG_CACHE_HOME/libai_ext`` (or ``~/.cache``)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "libai_ext", f"libai-main-{LIBAI_MAIN_COMMIT[:7]}.tar.gz")


def fetch_libai_source():
    """Download LiBai main's archive at the pinned commit into ``cached_libai_source()`` (whole or not at all:
    written aside, then renamed); returns its path, or raises ``TextDataError`` naming the URL."""
    import urllib.request

    url = LIBAI_SOURCE_URL
    target = cached_libai_source()
    os.makedirs(os.path.dirname(target), exist_ok=True)
    logger.info(f"downloading LiBai main's source ({LIBAI_MAIN_COMMIT[:7]}) for its {TOOL}: {url} -> {target}")
    fd, partial = tempfile.mkstemp(prefix=".download-", dir=os.path.dirname(target))
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
            shutil.copyfileobj(response, out)
        if not tarfile.is_tarfile(partial):
            raise TextDataError(f"{url} did not give a .tar.gz archive")
        os.replace(partial, target)
    except OSError as e:
        raise TextDataError(f"cannot download LiBai main's source from {url}: {e}") from e
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    return target


def resolve_libai_source(libai_source=None):
    """The LiBai source folder or archive to take the tool from (downloaded once when none is given or
    found), or a clear error naming how to give one."""
    source = libai_source or default_libai_source()
    if not libai_source and not source:
        try:
            source = fetch_libai_source()
        except TextDataError as e:
            raise TextDataError(f"LiBai's {TOOL} is needed, but no LiBai source was found and {e}: pass a LiBai "
                                f"source folder or archive (${LIBAI_SOURCE_ENV}, text_data.libai_source=... in a "
                                "config, --libai-source to tools/make_text_data.py)") from e
    if not os.path.exists(source):
        raise TextDataError(
            f"LiBai's {TOOL} is needed to build the text data, but no LiBai source was found "
            f"(libai_source={libai_source!r}, ${LIBAI_SOURCE_ENV}={os.environ.get(LIBAI_SOURCE_ENV)!r}): pass a "
            "LiBai source folder or archive (text_data.libai_source=... in a config, --libai-source to "
            "tools/make_text_data.py)")
    return source


@contextlib.contextmanager
def preprocess_tool(libai_source=None):
    """The path of LiBai's ``tools/preprocess_data.py`` from a source folder or ``.tar.gz``
    archive, extracted into a temporary folder removed on exit."""
    source = resolve_libai_source(libai_source)
    if os.path.isdir(source):
        path = os.path.join(source, TOOL)
        if not os.path.isfile(path):
            raise TextDataError(f"{source} is not a LiBai source folder: it has no {TOOL}")
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="libai-tool-") as tmp, tarfile.open(source) as archive:
        members = [m for m in archive.getmembers() if m.isfile() and m.name.endswith("/" + TOOL)]
        if not members:
            raise TextDataError(f"{source} holds no {TOOL}")
        member = min(members, key=lambda m: m.name.count("/"))
        member.name = os.path.join("libai", TOOL)  # no path of the archive's choosing
        archive.extract(member, tmp)
        yield os.path.join(tmp, member.name)


def run_preprocess_tool(tool, input_path, output_prefix, tokenizer_args, python=None):
    """Run LiBai's preprocess tool (``--dataset-impl mmap``, one worker) as a process of its own, outside
    any launched job; returns the output prefix of its ``text`` key (``<output_prefix>_text_document``)."""
    command = [python or sys.executable, tool, "--input", input_path, "--json-keys", "text",
               "--output-prefix", output_prefix, "--dataset-impl", "mmap", "--workers", "1"] + tokenizer_args
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_ENV}
    try:
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                              timeout=TOOL_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise TextDataError(f"LiBai's preprocess tool ran past {TOOL_TIMEOUT_S} s: {' '.join(command)}\n"
                            f"{(e.stdout or '')[-3000:]}") from e
    if done.returncode != 0:
        raise TextDataError(f"LiBai's preprocess tool failed ({done.returncode}): {' '.join(command)}\n"
                            f"{done.stdout[-3000:]}")
    return f"{output_prefix}_text_document"


def group_into_documents(prefix, document_sizes, out_prefix):
    """Rewrite an indexed dataset whose documents are single sentences so that its documents are
    ``document_sizes`` consecutive sentences each; the tokens (``.bin``) are copied unchanged."""
    from libai.data.data_utils.indexed_dataset import MMapIndexedDataset

    dataset = MMapIndexedDataset(prefix, skip_warmup=True)
    dtype = MMapIndexedDataset.Index(prefix + ".idx", skip_warmup=True).dtype  # what the tool chose
    sentences = len(dataset.sizes)
    if sum(document_sizes) != sentences:
        raise TextDataError(f"{prefix}: {sentences} sentences in the indexed dataset, but the documents "
                            f"hold {sum(document_sizes)} (the tool dropped an empty one?)")
    doc_idx = np.concatenate([[0], np.cumsum(document_sizes)]).astype(np.int64)
    with MMapIndexedDataset.Index.writer(out_prefix + ".idx", dtype) as index:
        index.write(np.asarray(dataset.sizes), doc_idx)
    shutil.copyfile(prefix + ".bin", out_prefix + ".bin")
    return out_prefix


def _documents(paragraphs):
    """``[(source, [paragraph, ...])]`` in corpus order."""
    documents = []
    for source, paragraph in paragraphs:
        if not documents or documents[-1][0] != source:
            documents.append((source, []))
        documents[-1][1].append(paragraph)
    return documents


def _write_lines(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def _build(folder, settings, libai_source, python):
    paragraphs = corpus_paragraphs(max_chars=settings["max_chars"])
    documents = _documents(paragraphs)
    texts = ["\n\n".join(ps) for _, ps in documents]
    sentences = [[s for p in ps for s in split_sentences(p)] for _, ps in documents]
    _write_lines(os.path.join(folder, FILES["documents"]),
                 ({"text": text, "source": source} for text, (source, _) in zip(texts, documents)))
    _write_lines(os.path.join(folder, FILES["sentences"]),
                 ({"text": s, "document": d} for d, doc in enumerate(sentences) for s in doc))

    vocab, merges = train_byte_bpe(texts, settings["bpe_merges"])
    write_gpt2_files(vocab, merges, os.path.join(folder, "gpt2"))
    pieces = wordpiece_vocab(texts, settings["wordpiece_size"])
    write_wordpiece_vocab(pieces, os.path.join(folder, "bert"))
    write_roberta_files(vocab, merges, os.path.join(folder, "roberta"))

    path = lambda key: os.path.join(folder, FILES[key])  # noqa: E731
    with preprocess_tool(libai_source) as tool:
        run_preprocess_tool(tool, path("documents"), os.path.join(folder, "gpt2"), [
            "--tokenizer-name", "GPT2Tokenizer", "--vocab-file", path("gpt2_vocab"),
            "--merges-file", path("gpt2_merges")], python)
        sentence_tokenizers = {
            "bert_prefix": ["--tokenizer-name", "BertTokenizer", "--vocab-file", path("bert_vocab"), "--do-lower-case"],
            # GPT2Tokenizer on RoBERTa's files: the same byte-level BPE and ids as RobertaTokenizer, which
            # LiBai 0.1.1 lacks (tests/test_text_data.py compares them on LiBai main).
            "roberta_prefix": ["--tokenizer-name", "GPT2Tokenizer", "--vocab-file", path("roberta_vocab"),
                               "--merges-file", path("roberta_merges")],
        }
        for key, tokenizer_args in sentence_tokenizers.items():
            one_per_sentence = run_preprocess_tool(tool, path("sentences"), os.path.join(folder, f"{key}_single"),
                                                   tokenizer_args, python)
            group_into_documents(one_per_sentence, [len(doc) for doc in sentences], path(key))
            for suffix in (".bin", ".idx"):
                os.remove(one_per_sentence + suffix)
    return {
        "sources": "scikit-learn's dataset descriptions and CPython's reference documentation",
        "corpus_sha256_16": corpus_digest(paragraphs),
        "documents": len(documents), "paragraphs": len(paragraphs),
        "sentences": sum(len(doc) for doc in sentences), "characters": sum(len(p) for _, p in paragraphs),
        "gpt2_vocab_size": len(vocab), "bpe_merges": len(merges), "wordpiece_size": len(pieces),
        "settings": settings, "files": FILES,
        "tool": f"{TOOL} of {os.path.basename(str(libai_source or default_libai_source()))}",
    }


def read_manifest(root):
    path = os.path.join(root, MANIFEST)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _check_settings(root, manifest, settings):
    if manifest["settings"] != settings:
        raise TextDataError(f"{root} was built with {manifest['settings']}, not {settings}: remove it or use "
                            "another root")


@contextlib.contextmanager
def _locked(root):
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, ".build.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def ensure_text_data(root=DEFAULT_ROOT, libai_source=None, python=None, **settings):
    """Build the text data under ``root`` unless it is there; returns ``root``.

    ``settings`` override ``DEFAULT_SETTINGS`` (a folder built with other ones is refused, never overwritten);
    ``python`` runs LiBai's tool (default: this interpreter).
    """
    unknown = set(settings) - set(DEFAULT_SETTINGS)
    if unknown:
        raise TypeError(f"ensure_text_data: unknown settings {sorted(unknown)} (known: {sorted(DEFAULT_SETTINGS)})")
    settings = {**DEFAULT_SETTINGS, **settings}
    manifest = read_manifest(root)
    if manifest is None:
        with _locked(root):
            manifest = read_manifest(root)  # another process may have built it while this one waited
            if manifest is None:
                logger.info(f"building LiBai text data under {root} (about half a minute, once)")
                manifest = _build_into(root, settings, libai_source, python)
    _check_settings(root, manifest, settings)
    return root


def _build_into(root, settings, libai_source, python):
    resolve_libai_source(libai_source)  # before any work
    leftovers = [name for name in os.listdir(root) if not name.startswith(".")]
    if leftovers:
        raise TextDataError(f"{root} holds {sorted(leftovers)[:5]} but no {MANIFEST}: not a text data folder "
                            "(or an interrupted build); remove it or use another root")
    tmp = tempfile.mkdtemp(prefix=".build-", dir=root)
    try:
        manifest = _build(tmp, settings, libai_source, python)
        for name in os.listdir(tmp):
            os.rename(os.path.join(tmp, name), os.path.join(root, name))
        with open(os.path.join(root, MANIFEST), "w", encoding="utf-8") as f:  # last: marks a finished build
            json.dump(manifest, f, indent=1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return manifest


def text_data_file(root=DEFAULT_ROOT, name="gpt2_vocab", libai_source=None, **settings):
    """The path of one of ``FILES`` under ``root`` (an indexed dataset's prefix for
    ``*_prefix``), building the data first if needed (with ``settings``, see ``ensure_text_data``):
    what the configs' LazyCalls read."""
    if name not in FILES:
        raise KeyError(f"text data has no {name!r} (known: {sorted(FILES)})")
    ensure_text_data(root, libai_source=libai_source, **settings)
    if name not in read_manifest(root)["files"]:
        raise TextDataError(f"{root} was built without {FILES[name]} (an older libai_ext): remove it to rebuild, "
                            "or use another root")
    return os.path.join(root, FILES[name])
