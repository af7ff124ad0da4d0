"""libai_ext.data.text_data and its parts: the corpus, our tokenizer training, and the indexed datasets
that LiBai's own preprocess tool builds, read back by the installed LiBai's own tokenizers and readers.

One build per session (``libai_text_data`` in conftest: about half a minute, LiBai's tool runs three times);
everything else runs in this process.
"""
import json
import os
import shutil

import numpy as np
import pytest

from libai_ext.data import text_corpus, text_data, tokenizer_training
from libai_ext.data.text_data import FILES, TextDataError, ensure_text_data, read_manifest


def path(root, key):
    return os.path.join(root, FILES[key])


def read_lines(root, key):
    with open(path(root, key), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def gpt2_tokenizer(libai_text_data):
    from libai.tokenizer import GPT2Tokenizer

    return GPT2Tokenizer(path(libai_text_data, "gpt2_vocab"), path(libai_text_data, "gpt2_merges"))


@pytest.fixture(scope="module")
def bert_tokenizer(libai_text_data):
    from libai.tokenizer import BertTokenizer

    return BertTokenizer(path(libai_text_data, "bert_vocab"), do_lower_case=True)


# --- the corpus ----------------------------------------------------------------------------------

def test_paragraphs_keep_prose_and_drop_markup_tables_and_code():
    rst = ("Iris plants dataset\n--------------------\n\n"
           ":Number of Instances: 150 (50 in each of three classes)\n\n"
           "============== ==== ====\n  sepal length   4.3  7.9\n============== ==== ====\n\n"
           "The famous Iris database, first used by Sir R.A. Fisher. The dataset is taken\n"
           "from Fisher's paper, see :ref:`the guide <iris>` and ``load_iris``.\n\n"
           "   iter = type(iter).__aiter__(iter)\n   running = True\n\n"
           ".. dropdown:: References for the curious reader of this text\n")
    assert text_corpus.paragraphs_of(rst) == [
        "The famous Iris database, first used by Sir R.A. Fisher. The dataset is taken from Fisher's paper, "
        "see the guide and load_iris."]


def test_sentences_split_at_ends_not_at_abbreviations_or_initials():
    paragraph = ("The data, e.g. the iris set, came from Sir R.A. Fisher. Is it old? Yes! "
                 "\"Quotes\" start sentences too.")
    assert text_corpus.split_sentences(paragraph) == [
        "The data, e.g. the iris set, came from Sir R.A. Fisher.", "Is it old?", "Yes!",
        "\"Quotes\" start sentences too."]


def test_the_default_corpus_is_a_few_hundred_kb_of_prose():
    paragraphs = text_corpus.corpus_paragraphs()
    characters = sum(len(p) for _, p in paragraphs)
    assert 150_000 < characters < 1_000_000, characters
    assert any(name.startswith("sklearn/datasets/descr/") for name, _ in paragraphs)
    words = [w for _, p in paragraphs for w in p.split()]
    assert sum(w.isalpha() for w in words) > 0.6 * len(words)  # words, not code or numbers


# --- our tokenizer training ----------------------------------------------------------------------

def test_byte_alphabet_is_gpt2s_in_gpt2s_order():
    from libai.tokenizer.tokenization_gpt2 import bytes_to_unicode

    ours = tokenizer_training.byte_alphabet()
    assert list(ours.items()) == list(bytes_to_unicode().items())
    assert len(set(ours.values())) == 256 and all(not c.isspace() for c in ours.values())


def test_bpe_merges_the_most_frequent_pair_until_none_occurs_twice():
    # Pre-tokens "ab", " ab", " ab", " cd" (a space is spelled "Ġ"): (a, b) occurs 3 times, then
    # (Ġ, ab) twice; after that every pair occurs once.
    vocab, merges = tokenizer_training.train_byte_bpe(["ab ab ab cd"], num_merges=10)
    assert merges == [("a", "b"), ("Ġ", "ab")]
    assert list(vocab)[256:] == ["ab", "Ġab", tokenizer_training.END_OF_TEXT]
    assert list(vocab.values()) == list(range(259))


def test_bpe_ties_go_to_the_smallest_pair_and_stop_at_the_requested_count():
    _, merges = tokenizer_training.train_byte_bpe(["xy xy ab ab"], num_merges=1)
    assert merges == [("a", "b")]  # (a, b) and (x, y) both occur twice


def test_gpt2_files_load_in_libais_tokenizer(tmp_path):
    from libai.tokenizer import GPT2Tokenizer

    vocab, merges = tokenizer_training.train_byte_bpe(["the cat sat on the mat, the end"], num_merges=5)
    tokenizer = GPT2Tokenizer(*tokenizer_training.write_gpt2_files(vocab, merges, str(tmp_path)))
    assert tokenizer.bpe_ranks == {pair: rank for rank, pair in enumerate(merges)}  # every merge, in order
    assert tokenizer.decode(tokenizer.encode("the cat sat")) == "the cat sat"
    assert tokenizer.vocab_size == len(vocab)


def test_wordpiece_vocab_has_the_special_tokens_first_and_covers_its_characters():
    tokens = tokenizer_training.wordpiece_vocab(["Walking walks; the walker walked, talking."], size=60, min_count=1)
    assert tokens[:5] == list(tokenizer_training.BERT_SPECIAL_TOKENS)
    assert len(tokens) == len(set(tokens)) <= 60
    assert {"w", "##k", ";", "walking"} <= set(tokens)
    with pytest.raises(ValueError, match="smaller than"):
        tokenizer_training.wordpiece_vocab(["Walking walks"], size=8)


# --- the built folder, read by LiBai -------------------------------------------------------------

def test_manifest_describes_what_was_built(libai_text_data):
    manifest = read_manifest(libai_text_data)
    assert manifest["settings"] == text_data.DEFAULT_SETTINGS
    # 256 bytes + 767 merges + <|endoftext|>: no padding for any tp up to 8 (make_vocab_size_divisible_by=128).
    assert manifest["gpt2_vocab_size"] == 1024 and manifest["wordpiece_size"] == 2048
    assert manifest["documents"] == len(read_lines(libai_text_data, "documents"))
    assert manifest["sentences"] == len(read_lines(libai_text_data, "sentences"))


def test_gpt2_tokenizer_round_trips_the_corpus_and_its_merges_shorten_it(libai_text_data, gpt2_tokenizer):
    documents = [row["text"] for row in read_lines(libai_text_data, "documents")]
    tokens = 0
    for text in documents:
        ids = gpt2_tokenizer.encode(text)
        # (decode() would also "clean up" spaces before punctuation: join the tokens' bytes instead)
        assert gpt2_tokenizer.convert_tokens_to_string(gpt2_tokenizer.convert_ids_to_tokens(ids)) == text
        assert max(ids) < gpt2_tokenizer.vocab_size == 1024
        tokens += len(ids)
    assert tokens < 0.4 * sum(len(t.encode("utf-8")) for t in documents)  # bytes alone would be 1.0


def test_bert_tokenizer_reads_the_corpus_without_unknown_tokens(libai_text_data, bert_tokenizer):
    assert [bert_tokenizer.pad_token_id, bert_tokenizer.unk_token_id, bert_tokenizer.cls_token_id,
            bert_tokenizer.sep_token_id, bert_tokenizer.mask_token_id] == [0, 1, 2, 3, 4]
    sentences = [row["text"] for row in read_lines(libai_text_data, "sentences")]
    unknown = sum(i == bert_tokenizer.unk_token_id for s in sentences for i in bert_tokenizer.encode(s))
    assert unknown == 0


def test_gpt2_indexed_dataset_holds_each_documents_tokens(libai_text_data, gpt2_tokenizer):
    from libai.data.data_utils import get_indexed_dataset

    dataset = get_indexed_dataset(path(libai_text_data, "gpt2_prefix"), "mmap", True)
    documents = [row["text"] for row in read_lines(libai_text_data, "documents")]
    assert list(dataset.doc_idx) == list(range(len(documents) + 1))  # one item per document
    for d, text in enumerate(documents):
        assert dataset.get(d).tolist() == gpt2_tokenizer.encode(text), f"document {d}"


def test_bert_indexed_dataset_holds_sentences_grouped_into_their_documents(libai_text_data, bert_tokenizer):
    from libai.data.data_utils import get_indexed_dataset

    dataset = get_indexed_dataset(path(libai_text_data, "bert_prefix"), "mmap", True)
    rows = read_lines(libai_text_data, "sentences")
    per_document = np.bincount([row["document"] for row in rows])
    assert list(dataset.doc_idx) == [0] + np.cumsum(per_document).tolist()
    assert (per_document >= 2).mean() > 0.8  # sentence pairs for BertDataset's binary head
    for s, row in enumerate(rows):
        assert dataset[s].tolist() == bert_tokenizer.encode(row["text"]), f"sentence {s}"


def test_roberta_files_are_the_bpe_in_robertas_layout(libai_text_data, gpt2_tokenizer):
    with open(path(libai_text_data, "roberta_vocab"), encoding="utf-8") as f:
        vocab = json.load(f)
    # <s> <pad> </s> <unk> first (LiBai's RoBERTa pads with id 1), <mask> last, every BPE symbol but
    # GPT-2's <|endoftext|> in between, in GPT-2's order: 1028 tokens, no padding up to tp4.
    assert [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])][:4] == ["<s>", "<pad>", "</s>", "<unk>"]
    assert sorted(vocab.values()) == list(range(1028)) and vocab["<mask>"] == 1027
    gpt2 = gpt2_tokenizer.get_vocab()
    assert all(vocab[t] == i + 4 for t, i in gpt2.items() if t != tokenizer_training.END_OF_TEXT)
    with open(path(libai_text_data, "roberta_merges"), encoding="utf-8") as f, \
            open(path(libai_text_data, "gpt2_merges"), encoding="utf-8") as g:
        assert f.read() == g.read()


def test_roberta_indexed_dataset_holds_what_libais_roberta_tokenizer_encodes(libai_text_data):
    """Built with GPT2Tokenizer over RoBERTa's files (0.1.1 has no RobertaTokenizer): on LiBai main,
    RobertaTokenizer itself encodes every sentence to the same ids."""
    import libai.tokenizer
    from libai.data.data_utils import get_indexed_dataset

    dataset = get_indexed_dataset(path(libai_text_data, "roberta_prefix"), "mmap", True)
    rows = read_lines(libai_text_data, "sentences")
    assert len(dataset) == len(rows)
    assert list(dataset.doc_idx) == [0] + np.cumsum(np.bincount([row["document"] for row in rows])).tolist()
    roberta = hasattr(libai.tokenizer, "RobertaTokenizer")
    tokenizer_class = libai.tokenizer.RobertaTokenizer if roberta else libai.tokenizer.GPT2Tokenizer
    tokenizer = tokenizer_class(path(libai_text_data, "roberta_vocab"), path(libai_text_data, "roberta_merges"))
    for s, row in enumerate(rows):
        assert dataset[s].tolist() == tokenizer.encode(row["text"]), f"sentence {s}"
    if roberta:
        assert (tokenizer.pad_token_id, tokenizer.mask_token_id, len(tokenizer)) == (1, 1027, 1028)


# --- building: once, never over something else ----------------------------------------------------

def test_a_built_folder_is_not_rebuilt_and_other_settings_are_refused(libai_text_data):
    manifest = os.path.join(libai_text_data, text_data.MANIFEST)
    before = os.stat(manifest).st_mtime_ns
    assert ensure_text_data(libai_text_data) == libai_text_data
    assert text_data.text_data_file(libai_text_data, "bert_vocab") == path(libai_text_data, "bert_vocab")
    assert os.stat(manifest).st_mtime_ns == before
    with pytest.raises(TextDataError, match="bpe_merges"):
        ensure_text_data(libai_text_data, bpe_merges=100)


def test_a_foreign_folder_or_a_missing_libai_source_is_a_clear_error(tmp_path, monkeypatch):
    (tmp_path / "source.tar.gz").write_bytes(b"")  # found, so the folder is what is refused
    monkeypatch.setenv(text_data.LIBAI_SOURCE_ENV, str(tmp_path / "source.tar.gz"))
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine")
    with pytest.raises(TextDataError, match="no MANIFEST.json"):
        ensure_text_data(str(tmp_path / "foreign"))
    assert (tmp_path / "foreign" / "notes.txt").read_text() == "mine"
    monkeypatch.setenv(text_data.LIBAI_SOURCE_ENV, str(tmp_path / "nowhere.tar.gz"))
    with pytest.raises(TextDataError, match="libai_source"):
        ensure_text_data(str(tmp_path / "empty"))
    with pytest.raises(KeyError, match="known"):
        text_data.text_data_file(str(tmp_path), "gpt3_vocab")


# --- finding LiBai's source: beside the checkout, beside the one it was cloned from, or downloaded once ---

def _archive_with_the_tool(path):
    import io
    import tarfile

    body = b"# LiBai's preprocess tool stands here\n"
    with tarfile.open(path, "w:gz") as archive:
        member = tarfile.TarInfo(f"libai-main/{text_data.TOOL}")
        member.size = len(body)
        archive.addfile(member, io.BytesIO(body))
    return path


@pytest.fixture
def nowhere_else(tmp_path, monkeypatch):
    """No archive from the environment, beside the checkout or cloned-from checkout, or in the cache."""
    monkeypatch.delenv(text_data.LIBAI_SOURCE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(text_data.glob, "glob", lambda pattern: [])
    return tmp_path


def test_a_clone_of_a_local_checkout_finds_the_archive_beside_that_checkout(tmp_path):
    import subprocess

    checkout = tmp_path / "work" / "project"
    vendor = tmp_path / "work" / "shared" / "vendor"
    vendor.mkdir(parents=True)
    _archive_with_the_tool(vendor / "libai-main-9dcbe3b.tar.gz")
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    clone = tmp_path / "elsewhere" / "clone"
    subprocess.run(["git", "clone", "-q", str(checkout), str(clone)], check=True, stderr=subprocess.DEVNULL)
    assert text_data._cloned_from(str(clone)) == str(checkout)
    assert text_data._cloned_from(str(checkout)) is None  # no origin
    assert text_data._cloned_from(str(tmp_path / "not-a-repository")) is None


def test_with_no_source_anywhere_the_archive_is_downloaded_once_into_the_cache(nowhere_else, monkeypatch):
    served = _archive_with_the_tool(nowhere_else / "served.tar.gz")
    monkeypatch.setattr(text_data, "LIBAI_SOURCE_URL", served.as_uri())
    assert text_data.default_libai_source() is None
    source = text_data.resolve_libai_source()
    assert source == text_data.cached_libai_source()
    assert source.startswith(str(nowhere_else / "cache" / "libai_ext"))
    assert open(source, "rb").read() == served.read_bytes()
    assert text_data.default_libai_source() == source  # found from now on: no second download
    with text_data.preprocess_tool() as tool:
        assert open(tool).read() == "# LiBai's preprocess tool stands here\n"
    assert os.listdir(os.path.dirname(source)) == [os.path.basename(source)]  # nothing partial left


def test_a_failed_download_names_the_url_and_leaves_nothing(nowhere_else, monkeypatch):
    (nowhere_else / "page.html").write_text("<html>not an archive</html>")
    for url, reason in (((nowhere_else / "missing.tar.gz").as_uri(), "cannot download"),
                        ((nowhere_else / "page.html").as_uri(), "did not give a .tar.gz")):
        monkeypatch.setattr(text_data, "LIBAI_SOURCE_URL", url)
        with pytest.raises(TextDataError, match=reason) as refused:
            text_data.resolve_libai_source()
        assert url in str(refused.value) and text_data.LIBAI_SOURCE_ENV in str(refused.value)
        cache = os.path.dirname(text_data.cached_libai_source())
        assert not os.path.isdir(cache) or os.listdir(cache) == []


def test_the_downloaded_commit_is_the_makefiles_pin(repo_root):
    makefile = open(os.path.join(repo_root, "Makefile")).read()
    assert f"LIBAI_MAIN_COMMIT := {text_data.LIBAI_MAIN_COMMIT}\n" in makefile
    assert text_data.LIBAI_MAIN_COMMIT in text_data.LIBAI_SOURCE_URL
    import subprocess

    tarball = subprocess.run(["make", "--no-print-directory", "-C", repo_root, "--eval", "print-%: ; @echo $($*)",
                              "print-LIBAI_MAIN_TARBALL"], capture_output=True, text=True, timeout=60).stdout.strip()
    assert os.path.basename(text_data.cached_libai_source()) == tarball  # where the Makefile looks


def test_a_folder_built_without_a_file_says_so(libai_text_data, tmp_path):
    """A folder an older libai_ext built (its manifest lists fewer files) is named, not half-read."""
    older = tmp_path / "older"
    shutil.copytree(libai_text_data, older)
    manifest = read_manifest(str(older))
    del manifest["files"]["roberta_vocab"]
    (older / text_data.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(TextDataError, match="built without roberta/vocab.json"):
        text_data.text_data_file(str(older), "roberta_vocab")


def test_make_text_data_tool_reports_a_built_folder(repo_root, libai_text_data, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_text_data", os.path.join(repo_root, "tools", "make_text_data.py"))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.main(["--out", libai_text_data]) == 0
    assert json.loads(capsys.readouterr().out)["gpt2_vocab_size"] == 1024


def test_the_tool_runs_outside_the_launched_job(monkeypatch):
    """Started from a rank of a launch, the tool must not inherit the job's address: importing OneFlow
    with it would make the tool a second rank 0 (measured: the 2-rank first-use build hung)."""
    import subprocess

    for key, value in dict(MASTER_ADDR="127.0.0.1", MASTER_PORT="29500", WORLD_SIZE="2", RANK="0",
                           LOCAL_RANK="0", KEEP_ME="1").items():
        monkeypatch.setenv(key, value)
    seen = {}

    def fake_run(command, **kwargs):
        seen.update(kwargs["env"])
        return subprocess.CompletedProcess(command, 0, "")

    monkeypatch.setattr(text_data.subprocess, "run", fake_run)
    text_data.run_preprocess_tool("tool.py", "in.json", "out", ["--tokenizer-name", "GPT2Tokenizer"])
    assert seen["KEEP_ME"] == "1" and not set(text_data.LAUNCH_ENV) & set(seen)
