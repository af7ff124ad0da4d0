"""LiBai main's projects (MoCo v3, MAE, SimCSE, Llama, ChatGLM, Qwen, Baichuan) as shipped, for the tests: their
folders taken from an archive of LiBai main at the pinned commit, the user's adoption of the plugin written into a
copy of each script, the data they read, and the command-line overrides that size them for CPU ranks.

The adoption is what docs/usage.md shows a project's script changing, and nothing else: the base class of the
project's trainer becomes ``libai_ext.ConsistentBatchTrainer``, ``libai_ext.apply_patches()`` comes before LiBai's
set-up, and ``libai_ext.seed_from_config(cfg)`` replaces the project's own seeding (MAE seeds ``seed + rank`` on
every generator, CUDA's included, which aborts on a host without CUDA).  Each change must match the archive's
script exactly once, or the helper fails: a new commit of LiBai that moves the lines is seen, not silently
skipped.

"Stock" is the script as shipped with only what it needs to start on CPU ranks: libai_ext's repairs of LiBai's CPU
traps (``libai_ext.apply_patches()``: LiBai's set-up exits on its compile step without them), MAE without its CUDA
seeding line, MoCo with main's ``run_step(get_batch, input_placement_device)`` signature in its trainer (as shipped
it fails at the first step on LiBai main, docs/upstream-bugs.md).  Its trainer is LiBai's ``DefaultTrainer``.

SimCSE has no script of its own: its readme runs LiBai's ``tools/train_net.py`` from a LiBai checkout (its config
imports LiBai's ``configs.common``).  Its folder here is such a checkout: LiBai main's ``configs/`` and
``tools/train_net.py`` from LiBai main's source archive, and ``projects/SimCSE``; the script adopted is LiBai's.
Its data (Chinese SNLI and STS, BERT's Chinese vocabulary) are downloads: ``write_simcse_data`` writes the same
files in the same formats from real English sentences and the WordPiece vocabulary of ``libai_ext.data.text_data``.

Llama's SFT runs from a LiBai checkout too (its modules import ``projects.Llama`` and ``libai.inference``, which
pip's install of LiBai main lacks): ``make_libai_checkout``; its data (a Llama-2 checkpoint and the Alpaca set) are
downloads: ``write_llama_data`` writes a small HuggingFace-format Llama, a SentencePiece tokenizer and Alpaca-format
samples from the same English text.  ChatGLM's SFT the same way (``projects.ChatGLM``, ``libai.inference``):
``write_chatglm_data`` writes a small HuggingFace-format ChatGLM3, its SentencePiece tokenizer and SFT samples in
its JSON format, and its config reads their folders from ``DATA_DIR`` and ``CHATGLM_HF_DIR`` (``chatglm_env``).
Qwen's SFT the same way: ``write_qwen_data`` writes a small HuggingFace-format Qwen2, GPT-2 style ``vocab.json`` and
``merges.txt``, and Alpaca-format samples.  Baichuan's SFT runs LiBai's ``tools/train_net.py`` from a LiBai checkout
holding ``projects/Baichuan`` (as its readme does), on ``write_llama_data``'s tokenizer and samples.

The projects import torch at module level for their PyTorch checkpoint converters, which these runs never call;
``tests/project_stubs/torch`` stands in for that import (any use of it raises).
"""
import json
import os
import shutil
import tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_STAND_IN = os.path.join(ROOT, "tests", "project_stubs")
PROJECTS = ("MOCOV3", "MAE", "SimCSE", "Llama", "ChatGLM", "Qwen", "Baichuan")

# project: (its script, the adoption's edits of that script, the stock repairs: {file: edits})
IMPORT = ("from libai.utils.checkpoint import Checkpointer\n",
          "from libai.utils.checkpoint import Checkpointer\nimport libai_ext\n")
APPLY_PATCHES = ("    default_setup(cfg, args)\n", "    libai_ext.apply_patches()\n    default_setup(cfg, args)\n")
MAE_SEEDING = ("    seed_for_rank = cfg.train.seed + flow.env.get_rank()\n"
               "    flow.manual_seed(seed_for_rank)\n"
               "    flow.cuda.manual_seed(seed_for_rank)\n"
               "    np.random.seed(seed_for_rank)\n"
               "    random.seed(seed_for_rank)\n")
LIBAI_SEEDING = ("    seed_for_rank = cfg.train.seed + flow.env.get_rank()\n"
                 "    flow.manual_seed(seed_for_rank)\n"
                 "    if flow.cuda.is_available():\n"
                 "        flow.cuda.manual_seed(seed_for_rank)\n"
                 "    np.random.seed(seed_for_rank)\n"
                 "    random.seed(seed_for_rank)\n")
LLAMA_SCRIPT = "projects/Llama/train_net.py"
CHATGLM_SCRIPT = "projects/ChatGLM/train_net.py"
QWEN_SCRIPT = "projects/Qwen/train_net.py"
LIBAI_SCRIPT_ADOPTION = [  # LiBai's own tools/train_net.py: its trainer is DefaultTrainer itself
    IMPORT,
    ("    trainer = DefaultTrainer(cfg)\n", "    trainer = libai_ext.ConsistentBatchTrainer(cfg)\n"),
    APPLY_PATCHES,
    (LIBAI_SEEDING, "    libai_ext.seed_from_config(cfg)\n"),
]
SCRIPTS = {
    "MOCOV3": ("pretrain_net.py", [
        IMPORT,
        ("class MoCoPretrainingTrainer(DefaultTrainer):",
         "class MoCoPretrainingTrainer(libai_ext.ConsistentBatchTrainer):"),
        (APPLY_PATCHES[0], APPLY_PATCHES[1] + "    libai_ext.seed_from_config(cfg)\n"),
    ]),
    "MAE": ("train_net.py", [
        IMPORT,
        ("class Trainer(DefaultTrainer):", "class Trainer(libai_ext.ConsistentBatchTrainer):"),
        APPLY_PATCHES,
        (MAE_SEEDING, "    libai_ext.seed_from_config(cfg)\n"),
    ]),
    "SimCSE": ("tools/train_net.py", LIBAI_SCRIPT_ADOPTION),
    "Llama": (LLAMA_SCRIPT, [
        IMPORT,
        ("class LlamaTrainer(DefaultTrainer):", "class LlamaTrainer(libai_ext.ConsistentBatchTrainer):"),
        APPLY_PATCHES,
        (MAE_SEEDING, "    libai_ext.seed_from_config(cfg)\n"),  # Llama's seeding block is MAE's, line for line
    ]),
    "ChatGLM": (CHATGLM_SCRIPT, [
        IMPORT,
        ("class ChatGLMTrainer(DefaultTrainer):", "class ChatGLMTrainer(libai_ext.ConsistentBatchTrainer):"),
        APPLY_PATCHES,
        (MAE_SEEDING, "    libai_ext.seed_from_config(cfg)\n"),  # MAE's too
    ]),
    "Qwen": (QWEN_SCRIPT, [
        IMPORT,
        ("class Qwen2Trainer(DefaultTrainer):", "class Qwen2Trainer(libai_ext.ConsistentBatchTrainer):"),
        APPLY_PATCHES,
        (MAE_SEEDING, "    libai_ext.seed_from_config(cfg)\n"),  # MAE's too
    ]),
    # Baichuan has no script of its own: its readme runs LiBai's tools/train_net.py from a LiBai checkout
    "Baichuan": ("tools/train_net.py", LIBAI_SCRIPT_ADOPTION),
}
STOCK_REPAIRS = {
    "MOCOV3": {"pretrain_net.py": [IMPORT, APPLY_PATCHES], "trainer/moco_trainer.py": [
        ("def run_step(self, get_batch: Callable):",
         "def run_step(self, get_batch: Callable, input_placement_device: str = \"cuda\"):"),
        ("get_batch(data, getattr(self.data_loader, \"mixup_func\", None))",
         "get_batch(data, input_placement_device, getattr(self.data_loader, \"mixup_func\", None))"),
    ]},
    "MAE": {"train_net.py": [IMPORT, APPLY_PATCHES, ("    flow.cuda.manual_seed(seed_for_rank)\n", "")]},
    "SimCSE": {"tools/train_net.py": [IMPORT, APPLY_PATCHES]},
    "Llama": {LLAMA_SCRIPT: [IMPORT, APPLY_PATCHES, ("    flow.cuda.manual_seed(seed_for_rank)\n", "")]},
    "ChatGLM": {CHATGLM_SCRIPT: [IMPORT, APPLY_PATCHES, ("    flow.cuda.manual_seed(seed_for_rank)\n", "")]},
    "Qwen": {QWEN_SCRIPT: [IMPORT, APPLY_PATCHES, ("    flow.cuda.manual_seed(seed_for_rank)\n", "")]},
    "Baichuan": {"tools/train_net.py": [IMPORT, APPLY_PATCHES]},
}
ADOPTED_SUFFIX = "_libai_ext.py"
LLM_PROJECTS = ("Llama", "ChatGLM", "Qwen", "Baichuan")  # run from a LiBai checkout (``make_libai_checkout``)


def projects_archive():
    """An archive holding LiBai main's ``projects/`` at the pinned commit: the projects archive kept beside this
    checkout, else LiBai main's source archive when it holds them (GitHub's archive of the commit does)."""
    from libai_ext.data.text_data import resolve_libai_source, vendor_archive

    found = vendor_archive("libai-projects-*.tar.gz")
    if found:
        return found
    source = resolve_libai_source()
    with tarfile.open(source) as archive:
        if any("/projects/MOCOV3/" in name for name in archive.getnames()):
            return source
    raise FileNotFoundError(f"no archive of LiBai main's projects: none named libai-projects-*.tar.gz in "
                            f"../shared/vendor, and LiBai main's source {source} holds no projects/")


def extract_projects(dest):
    """``{project: folder}`` of the projects under ``dest``, extracted from ``projects_archive()`` (SimCSE's: a
    LiBai checkout holding it, with LiBai main's ``configs/`` and ``tools/train_net.py``)."""
    from conftest import copy_from_libai_source

    folders = {project: os.path.join(dest, project) for project in PROJECTS}
    checkout = {project: os.path.join(project, "projects", project) for project in PROJECTS[2:]}
    with tarfile.open(projects_archive()) as archive:
        for member in archive.getmembers():
            parts = member.name.split("/")
            if len(parts) > 2 and parts[1] == "projects" and parts[2] in PROJECTS and member.isfile():
                member.name = os.path.join(checkout.get(parts[2], parts[2]), *parts[3:])
                archive.extract(member, dest)
    copy_from_libai_source(folders["SimCSE"], lambda parts: parts[0] == "configs" or parts == ["tools", "train_net.py"])
    copy_from_libai_source(folders["Baichuan"], lambda parts: parts == ["tools", "train_net.py"])
    for project in LLM_PROJECTS:
        make_libai_checkout(folders[project])
    for project in PROJECTS:
        assert os.path.isfile(os.path.join(folders[project], SCRIPTS[project][0])), (project, dest)
    return folders


def edit_once(path, edits, out_path=None):
    """Apply each ``(old, new)`` of ``edits`` to the file at ``path``, each matching exactly once; write the
    result to ``out_path`` (default: in place)."""
    with open(path) as f:
        text = f.read()
    for old, new in edits:
        count = text.count(old)
        if count != 1:
            raise AssertionError(f"{path}: expected {old!r} exactly once, found it {count} times")
        text = text.replace(old, new)
    with open(out_path or path, "w") as f:
        f.write(text)


def adopt(folder, project):
    """The project's script with the plugin adopted, written beside it; returns its path."""
    script, edits = SCRIPTS[project]
    adopted = os.path.join(folder, script[:-3] + ADOPTED_SUFFIX)
    edit_once(os.path.join(folder, script), edits, adopted)
    return adopted


def stock_copy(folder, project, dest):
    """A copy of the project's folder at ``dest`` with only what stock needs on CPU ranks; returns its script."""
    shutil.copytree(folder, dest)
    for name, edits in STOCK_REPAIRS[project].items():
        edit_once(os.path.join(dest, name), edits)
    return os.path.join(dest, SCRIPTS[project][0])


def write_simcse_data(text_root, dest, sentences=200, pairs=20):
    """SimCSE's unsupervised data in its formats, under ``dest``: ``SNLI/train.txt`` (a JSON line per sentence,
    its ``origin``), ``STS/cnsd-sts-{train,dev,test}.txt`` (``id||sentence||sentence||score``) and ``vocab.txt``,
    from the real sentences and WordPiece vocabulary of ``libai_ext.data.text_data`` at ``text_root``."""
    from libai_ext.data.text_data import FILES

    with open(os.path.join(text_root, FILES["sentences"])) as f:
        text = [json.loads(line)["text"].replace("||", " ") for line in f]
    os.makedirs(os.path.join(dest, "SNLI"), exist_ok=True)
    os.makedirs(os.path.join(dest, "STS"), exist_ok=True)
    with open(os.path.join(dest, "SNLI", "train.txt"), "w") as f:
        f.writelines(json.dumps({"origin": sentence}) + "\n" for sentence in text[:sentences])
    for n, split in enumerate(("train", "dev", "test")):
        first = sentences + 2 * pairs * n
        with open(os.path.join(dest, "STS", f"cnsd-sts-{split}.txt"), "w") as f:
            f.writelines(f"{i}||{text[i]}||{text[i + 1]}||{i % 6}\n" for i in range(first, first + 2 * pairs, 2))
    shutil.copy(os.path.join(text_root, FILES["bert_vocab"]), os.path.join(dest, "vocab.txt"))
    return dest


def make_libai_checkout(folder):
    """Make ``folder`` (holding one of ``LLM_PROJECTS``) a LiBai main checkout as ``pip install -e .`` leaves one:
    LiBai main's ``libai/`` (with ``libai/inference``, which pip's install from the archive lacks) and ``configs/``
    from its source, plus what setup.py makes there: ``libai/config/configs`` (a link to ``configs/``, which LiBai's
    ``get_config`` reads), ``libai/version.py`` and the compiled dataset helpers, copied from the installed LiBai.
    Not the helpers' Makefile: LiBai's start-up would run it, and its ``python3`` is whatever the host's PATH names
    (libai_ext's ``compile_step`` repair skips the step where no Makefile is, as after pip's install).  Every run of
    a launch that holds an LLM project's run imports LiBai from here (``libai_checkout``)."""
    import glob

    import libai

    from conftest import copy_from_libai_source

    copy_from_libai_source(folder, lambda parts: parts[0] in ("libai", "configs") and parts[-1] != "Makefile")
    installed = os.path.dirname(libai.__file__)
    built = [os.path.join(installed, "version.py")] + glob.glob(os.path.join(installed, "data", "data_utils", "helpers*"))
    for path in built:
        if not path.endswith(".cpp"):
            shutil.copy(path, os.path.join(folder, "libai", os.path.relpath(os.path.dirname(path), installed)))
    os.symlink(os.path.join("..", "..", "configs"), os.path.join(folder, "libai", "config", "configs"))
    return folder


def libai_checkout(plan):
    """The LiBai checkout a launch of ``plan`` imports LiBai from (the first run folder holding ``libai/``: Llama's
    or its stock copy), or None."""
    return next((entry["folder"] for entry in plan if os.path.isdir(os.path.join(entry["folder"], "libai"))), None)


# The HuggingFace Llama checkpoint Llama's loader reads (config.json's keys; the loader overwrites model.cfg from it)
LLAMA = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128, vocab_size=128,
             max_position_embeddings=64, rms_norm_eps=1e-5, initializer_range=0.02)
LLAMA_SEQUENCE = 64
LLAMA_GLOBAL_BATCH = 16
LLAMA_ACCUMULATION = 8  # llama_sft.py's


LLAMA_CONFIG = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu", bos_token_id=1,
                    eos_token_id=2, tie_word_embeddings=False)
# Qwen's checkpoint: Llama's sizes in Qwen2's layout (biases on the q, k and v projections), and the vocabulary of
# GPT-2's byte-level BPE files of libai_ext.data.text_data (1024 entries, the last <|endoftext|>: Qwen's end of text)
QWEN = dict(LLAMA, vocab_size=1024)
QWEN_CONFIG = dict(architectures=["Qwen2ForCausalLM"], model_type="qwen2", hidden_act="silu", num_key_value_heads=4,
                   rope_theta=10000.0, bos_token_id=1023, eos_token_id=1023, tie_word_embeddings=False)
QWEN_ACCUMULATION = 1  # qwen_sft.py's
# Baichuan's runs build the model from the config (LiBai's tools/train_net.py loads no checkpoint): Llama's sizes, on
# Llama's tokenizer and samples (Baichuan's data_prepare.py encodes them as Llama's prepare_alpaca.py does)
BAICHUAN = dict(hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128, vocab_size=128,
                max_position_embeddings=64)
BAICHUAN_ACCUMULATION = 8  # baichuan_sft.py's


def read_sentences(text_root):
    """The real English sentences of ``libai_ext.data.text_data`` at ``text_root``."""
    from libai_ext.data.text_data import FILES

    with open(os.path.join(text_root, FILES["sentences"])) as f:
        return [json.loads(line)["text"] for line in f]


def write_llama_tokenizer(text_root, dest, vocab_size=LLAMA["vocab_size"]):
    """A SentencePiece BPE model of ``vocab_size`` pieces (Llama's and ChatGLM's ids: <unk> 0, <s> 1, </s> 2) trained
    on ``read_sentences(text_root)``: ``dest``/tokenizer.model."""
    import sentencepiece as spm

    sentences = read_sentences(text_root)
    spm.SentencePieceTrainer.train(sentence_iterator=iter(sentences), model_prefix=os.path.join(dest, "tokenizer"),
                                   vocab_size=vocab_size, model_type="bpe", character_coverage=1.0,
                                   num_threads=1, minloglevel=2)
    return sentences, spm.SentencePieceProcessor(model_file=os.path.join(dest, "tokenizer.model"))


def write_llama_checkpoint(dest, seed=0, sizes=LLAMA, config=LLAMA_CONFIG, qkv_bias=False):
    """A HuggingFace-format Llama in ``dest``: ``config.json`` (``sizes`` and ``config``) and ``model.safetensors``
    (HF's key names; ``qkv_bias``: with the q, k and v projections' biases, as Qwen2's), weights drawn from a fixed
    numpy seed with 10 times config.json's ``initializer_range`` (norm weights around 1): loaded, they give a first
    loss of about 6.4, where weights drawn by LiBai's own initialisation give about ln(128) = 4.85
    (tests/test_libai_projects.py checks it)."""
    import numpy as np
    from safetensors.numpy import save_file

    rng = np.random.RandomState(seed)
    hidden, inner, vocab = sizes["hidden_size"], sizes["intermediate_size"], sizes["vocab_size"]

    def normal(*shape, mean=0.0, std=10 * sizes["initializer_range"]):
        return (mean + std * rng.standard_normal(shape)).astype(np.float32)

    weights = {"model.embed_tokens.weight": normal(vocab, hidden)}
    for n in range(sizes["num_hidden_layers"]):
        layer = f"model.layers.{n}."
        weights.update({layer + f"self_attn.{p}_proj.weight": normal(hidden, hidden) for p in "qkvo"})
        if qkv_bias:
            weights.update({layer + f"self_attn.{p}_proj.bias": normal(hidden) for p in "qkv"})
        weights.update({layer + "mlp.gate_proj.weight": normal(inner, hidden), layer + "mlp.up_proj.weight":
                        normal(inner, hidden), layer + "mlp.down_proj.weight": normal(hidden, inner)})
        weights.update({layer + f"{norm}.weight": normal(hidden, mean=1.0, std=0.1)
                        for norm in ("input_layernorm", "post_attention_layernorm")})
    weights.update({"model.norm.weight": normal(hidden, mean=1.0, std=0.1), "lm_head.weight": normal(vocab, hidden)})
    save_file(weights, os.path.join(dest, "model.safetensors"))
    with open(os.path.join(dest, "config.json"), "w") as f:
        json.dump(dict(sizes, **config), f, indent=1)
    return dest


def alpaca_sample(prompt, response):
    """One sample as Llama's ``utils/prepare_alpaca.py`` (``prepare_sample``, ``mask_inputs`` as shipped) encodes it,
    from token ids (Llama's: ``<s>`` prompt, response ``</s>``; Qwen's ``prepare_alpaca.py`` adds neither): prompt
    and response cut or padded to ``LLAMA_SEQUENCE + 1`` tokens, labels -1 on the prompt and the padding, inputs 0
    on the padding, then shifted by one."""
    import oneflow as flow

    example = (prompt + response)[:LLAMA_SEQUENCE + 1]
    example += [-1] * (LLAMA_SEQUENCE + 1 - len(example))
    labels = ([-1] * len(prompt) + example[len(prompt):])[:LLAMA_SEQUENCE + 1]
    inputs = [max(token, 0) for token in example]
    return {"input_ids": flow.tensor(inputs[:-1], dtype=flow.long), "labels": flow.tensor(labels[1:], dtype=flow.long)}


def write_llama_data(text_root, dest, train=200, test=16):
    """Llama's SFT inputs under ``dest``: ``checkpoint/`` (``write_llama_checkpoint`` and
    ``write_llama_tokenizer``'s ``tokenizer.model``) and ``alpaca_data/{train,test}`` as ``AlpacaDataset`` reads them
    (``flow.save`` of a list of ``alpaca_sample``s).  Instruction and response are the first 2-5 and 2-12 words of
    consecutive real sentences, prompts shorter than 32 tokens, without
    prepare_alpaca.py's prompt template, which alone takes more than 64 tokens of
    a 128-piece vocabulary: samples hold different numbers of masked and padding tokens, as Alpaca's do."""
    checkpoint = os.path.join(dest, "checkpoint")
    os.makedirs(checkpoint, exist_ok=True)
    sentences, tokens = write_llama_tokenizer(text_root, checkpoint)
    write_llama_checkpoint(checkpoint)
    write_alpaca_samples(sentences, tokens.encode, [tokens.bos_id()], [tokens.eos_id()], dest, train, test)
    return dest


def write_qwen_data(text_root, dest, train=200, test=16):
    """Qwen's SFT inputs under ``dest``: ``checkpoint/`` (``write_llama_checkpoint`` in Qwen2's layout, ``QWEN``,
    and GPT-2's byte-level BPE files of ``text_root`` as ``vocab.json`` and ``merges.txt``, which ``Qwen2Tokenizer``
    reads) and ``alpaca_data/{train,test}`` as ``QwenDataset`` reads them, from the same sentences as
    ``write_llama_data``'s, encoded by LiBai's ``GPT2Tokenizer`` over those files (Qwen's tokenizer is GPT-2's with
    another pre-tokenisation pattern: ids of the same vocabulary)."""
    from libai.tokenizer import GPT2Tokenizer

    from libai_ext.data.text_data import FILES

    checkpoint = os.path.join(dest, "checkpoint")
    os.makedirs(checkpoint, exist_ok=True)
    files = {name: shutil.copy(os.path.join(text_root, FILES[f"gpt2_{name}"]),
                               os.path.join(checkpoint, f"{name}.{ext}"))
             for name, ext in (("vocab", "json"), ("merges", "txt"))}
    with open(files["vocab"]) as f:
        vocab = json.load(f)
    if len(vocab) != QWEN["vocab_size"] or vocab["<|endoftext|>"] != QWEN_CONFIG["eos_token_id"]:
        raise AssertionError(f"{files['vocab']}: {len(vocab)} entries, <|endoftext|> "
                             f"{vocab.get('<|endoftext|>')}; QWEN expects {QWEN['vocab_size']} and "
                             f"{QWEN_CONFIG['eos_token_id']}")
    write_llama_checkpoint(checkpoint, sizes=QWEN, config=QWEN_CONFIG, qkv_bias=True)
    tokens = GPT2Tokenizer(vocab_file=files["vocab"], merges_file=files["merges"])
    write_alpaca_samples(read_sentences(text_root), tokens.encode, [], [], dest, train, test)
    return dest


def write_alpaca_samples(sentences, encode, bos, eos, dest, train, test):
    """``dest``/alpaca_data/{train,test}: ``alpaca_sample``s of ``bos`` prompt, response ``eos`` (see
    ``write_llama_data``) encoded by ``encode``."""
    import oneflow as flow

    words = [sentence.split() for sentence in sentences]
    pairs = [(encode(" ".join(words[2 * n][:2 + n % 4])), encode(" ".join(words[2 * n + 1][:2 + 3 * n % 11])))
             for n in range(len(words) // 2)]
    pairs = [(prompt, response) for prompt, response in pairs if len(prompt) < LLAMA_SEQUENCE // 2][:train + test]
    samples = [alpaca_sample(bos + prompt, response + eos) for prompt, response in pairs]
    os.makedirs(os.path.join(dest, "alpaca_data"), exist_ok=True)
    flow.save(samples[:train], os.path.join(dest, "alpaca_data", "train"))
    flow.save(samples[train:], os.path.join(dest, "alpaca_data", "test"))


ALPACA_ACCUMULATION = {"Llama": LLAMA_ACCUMULATION, "Qwen": QWEN_ACCUMULATION, "Baichuan": BAICHUAN_ACCUMULATION}


def alpaca_sft_overrides(project, data, iters, dp=1, tp=1, pp=1, graph=None, accumulation=None):
    """Llama's, Qwen's or Baichuan's SFT sized for CPU ranks on ``write_llama_data``'s folder (Qwen:
    ``write_qwen_data``'s): the model's sizes come from the checkpoint's config.json (``LLAMA``, ``QWEN``; Baichuan,
    which loads no checkpoint: ``BAICHUAN``), global batch 16 in ``accumulation`` micro-batches (as the config ships,
    ``ALPACA_ACCUMULATION``; graph runs take 1, as MAE's do), activation checkpointing as shipped, ``iters``
    optimizer steps."""
    if accumulation is None:
        accumulation = 1 if graph else ALPACA_ACCUMULATION[project]
    checkpoint = os.path.join(data, "checkpoint")
    if project == "Qwen":
        tokenizer = dict(vocab_file=os.path.join(checkpoint, "vocab.json"),
                         merges_file=os.path.join(checkpoint, "merges.txt"))
    else:
        tokenizer = dict(pretrained_model_path=os.path.join(checkpoint, "tokenizer.model"))
    if project == "Baichuan":
        model = [f"model.cfg.{k}={v}" for k, v in BAICHUAN.items()]
    else:
        model = [f"model.cfg.pretrained_model_path={checkpoint}"]
    sizes = run_sizes(dp, tp, pp, LLAMA["num_hidden_layers"], LLAMA_GLOBAL_BATCH, accumulation, iters)
    inputs = [f"dataloader.train.dataset.0.path={os.path.join(data, 'alpaca_data', 'train')}",
              f"dataloader.test.0.dataset.path={os.path.join(data, 'alpaca_data', 'test')}",
              "dataloader.test.0.num_workers=0"]
    for where in ("tokenization.tokenizer", "dataloader.train.dataset.0.tokenizer",
                  "dataloader.test.0.dataset.tokenizer"):
        inputs += [f"{where}.{k}={v}" for k, v in tokenizer.items()]
    if graph is not None:
        inputs.append(f"graph.enabled={graph}")
    return CPU + sizes + model + inputs


# ChatGLM's HuggingFace checkpoint at CPU size: ChatGLM3's architecture (rotary, RMSNorm, multi-query attention with
# 2 groups, SwiGLU, a QKV bias only) with 2 layers of width 64.  config.json leaves the dropouts out (HF's holds them
# at 0.0): LiBai's loader overwrites model.cfg with every key config.json holds, and the LoRA runs set hidden_dropout.
CHATGLM = dict(num_layers=2, hidden_size=64, num_attention_heads=4, kv_channels=16, ffn_hidden_size=128,
               multi_query_attention=True, multi_query_group_num=2, padded_vocab_size=512, seq_length=64,
               layernorm_epsilon=1e-5, rmsnorm=True, add_bias_linear=False, add_qkv_bias=True,
               apply_query_key_layer_scaling=True, attention_softmax_in_fp32=True,
               apply_residual_connection_post_layernorm=False, fp32_residual_connection=False,
               post_layer_norm=True, tie_word_embeddings=False, eos_token_id=2, pad_token_id=0)
CHATGLM_PIECES = 500  # ChatGLM's tokenizer numbers its 9 special tokens after the pieces: 509 ids in 512 rows
CHATGLM_GLOBAL_BATCH = 16
CHATGLM_ACCUMULATION = 8  # chatglm_sft.py's
# LoRA on the QKV projection as chatglm_config.py sets it, with its dropout and the model's hidden dropout on
CHATGLM_LORA = ("model.cfg.lora_enable=True", "model.cfg.lora_cfg.lora_dropout=0.1", "model.cfg.hidden_dropout=0.1")


def chatglm_hf_weights(seed=0):
    """``{HF ChatGLM key: float32 array}`` of ``CHATGLM``'s sizes from a fixed numpy seed, 10 times the scale of
    LiBai's initialisation (norm weights around 1): loaded, they give another first loss than LiBai's own."""
    import numpy as np

    rng = np.random.RandomState(seed)
    hidden, head, vocab = CHATGLM["hidden_size"], CHATGLM["kv_channels"], CHATGLM["padded_vocab_size"]
    heads = CHATGLM["num_attention_heads"] * head
    qkv = heads + 2 * CHATGLM["multi_query_group_num"] * head  # multi-query: 2 groups of keys and values
    shapes = {"transformer.embedding.word_embeddings.weight": (vocab, hidden),
              "transformer.encoder.final_layernorm.weight": (hidden,),
              "transformer.output_layer.weight": (vocab, hidden)}
    for n in range(CHATGLM["num_layers"]):
        layer = f"transformer.encoder.layers.{n}."
        shapes.update({layer + "input_layernorm.weight": (hidden,),
                       layer + "post_attention_layernorm.weight": (hidden,),
                       layer + "self_attention.query_key_value.weight": (qkv, hidden),
                       layer + "self_attention.query_key_value.bias": (qkv,),
                       layer + "self_attention.dense.weight": (hidden, heads),
                       layer + "mlp.dense_h_to_4h.weight": (2 * CHATGLM["ffn_hidden_size"], hidden),
                       layer + "mlp.dense_4h_to_h.weight": (hidden, CHATGLM["ffn_hidden_size"])})
    weights = {key: (1 + 0.1 * rng.standard_normal(shape) if key.endswith("layernorm.weight")
                     else 0.2 * rng.standard_normal(shape)).astype(np.float32) for key, shape in shapes.items()}
    # HF's checkpoint holds the rotary frequencies too (LiBai's ChatGLM loader drops them)
    rotary = head // 2
    weights["transformer.rotary_pos_emb.inv_freq"] = 1.0 / 10000 ** (np.arange(0, rotary, 2, dtype=np.float32) / rotary)
    return weights


def write_chatglm_data(text_root, dest, samples=200):
    """ChatGLM's SFT inputs under ``dest``: ``hf/`` (``CHATGLM_HF_DIR``: config.json, model.safetensors of
    ``chatglm_hf_weights``, ``write_llama_tokenizer``'s tokenizer.model of ``CHATGLM_PIECES`` pieces) and ``sft/``
    (``DATA_DIR``: train.json and test.json as ``ChatGLMTrainDataset`` reads them, ``{"prompt": [...], "query":
    [...], "response": [...]}``, query and response two consecutive real sentences)."""
    from safetensors.numpy import save_file

    hf, sft = os.path.join(dest, "hf"), os.path.join(dest, "sft")
    os.makedirs(hf, exist_ok=True)
    os.makedirs(sft, exist_ok=True)
    sentences, _ = write_llama_tokenizer(text_root, hf, CHATGLM_PIECES)
    save_file(chatglm_hf_weights(), os.path.join(hf, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(hf, "config.json"), "w") as f:
        json.dump(dict(CHATGLM, architectures=["ChatGLMModel"], model_type="chatglm", torch_dtype="float32"), f,
                  indent=1)
    for split, first in (("train", 0), ("test", 2 * samples)):
        pairs = range(first, first + 2 * samples, 2)
        with open(os.path.join(sft, f"{split}.json"), "w") as f:
            json.dump({"prompt": ["Continue: "] * samples, "query": [sentences[i] for i in pairs],
                       "response": [sentences[i + 1] for i in pairs]}, f)
    return dest


def chatglm_env(data):
    """The environment variables chatglm_sft.py reads when it loads, for ``write_chatglm_data``'s folder."""
    return {"DATA_DIR": os.path.join(data, "sft"), "CHATGLM_HF_DIR": os.path.join(data, "hf")}


def chatglm_overrides(data, iters, dp=1, tp=1, pp=1, graph=None, accumulation=None):
    """ChatGLM's SFT sized for CPU ranks on ``write_chatglm_data``'s folder: the model's sizes come from the
    checkpoint's config.json (``CHATGLM``), samples of 64 tokens, global batch 16 in ``accumulation`` micro-batches
    (8 as chatglm_sft.py ships, eager; graph mode, which it ships on, 1, as MAE's), activation checkpointing as
    shipped, ``iters`` optimizer steps.  chatglm_config.py's ``pretrained_model_path`` is a relative
    "chatglm/chatglm2-6b": set to the checkpoint CHATGLM_HF_DIR names."""
    graph = True if graph is None else graph
    if accumulation is None:
        accumulation = 1 if graph else CHATGLM_ACCUMULATION
    sizes = run_sizes(dp, tp, pp, CHATGLM["num_layers"], CHATGLM_GLOBAL_BATCH, accumulation, iters)
    inputs = [f"model.cfg.pretrained_model_path={chatglm_env(data)['CHATGLM_HF_DIR']}", f"graph.enabled={graph}"]
    inputs += [f"dataloader.train.dataset.0.{k}={v}" for k, v in dict(max_source_len=32, max_target_len=31,
                                                                       max_length=64).items()]
    return CPU + sizes + inputs


CPU = ["train.dist.device_type=cpu", "train.input_placement_device=cpu", "train.rdma_enabled=False",
       "train.amp.enabled=False"]
VIT = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2)
BERT = dict(hidden_size=64, num_attention_heads=4, hidden_layers=2, intermediate_size=256, vocab_size=2048)
GLOBAL_BATCH = 8


def run_sizes(dp, tp, pp, layers, global_batch, accumulation, iters):
    """The layout, batch and length of a run: ``iters`` steps of ``global_batch`` samples in ``accumulation``
    micro-batches, every iteration logged, no checkpoint, evaluation or loader worker."""
    return [f"train.dist.data_parallel_size={dp}", f"train.dist.tensor_parallel_size={tp}",
            f"train.dist.pipeline_parallel_size={pp}", f"train.dist.pipeline_num_layers={layers}",
            f"train.train_micro_batch_size={global_batch // dp // accumulation}",
            f"train.num_accumulation_steps={accumulation}",
            f"train.train_iter={iters}", "train.train_epoch=0", "train.log_period=1", "train.seed=1234",
            "train.checkpointer.period=100000", "dataloader.train.num_workers=0", "train.evaluation.enabled=False"]


def overrides(project, data, iters, dp=1, tp=1, pp=1, graph=None, accumulation=None):
    """The CPU-sized run of ``project`` on ``data`` (MoCo and MAE: the digits in ImageNet's layout at 32 x 32 and a
    ViT of depth 2 and width 32; SimCSE: ``write_simcse_data``'s folder and a BERT of depth 2 and width 64),
    global batch 8 (MAE: 2 micro-batches a step, as its config accumulates; in graph mode 1, since OneFlow 0.9.0's
    CPU graphs with gradient accumulation now and then compute a wrong gradient, docs/upstream-bugs.md §32),
    ``iters`` iterations."""
    if project in ALPACA_ACCUMULATION:
        return alpaca_sft_overrides(project, data, iters, dp, tp, pp, graph, accumulation)
    if project == "ChatGLM":
        return chatglm_overrides(data, iters, dp, tp, pp, graph, accumulation)
    accumulation = 2 if project == "MAE" and not graph else 1
    layers = VIT["depth"] * (2 if project == "MAE" else 1)  # MAE's decoder blocks take layer_idx after the encoder's
    sizes = run_sizes(dp, tp, pp, layers, GLOBAL_BATCH, accumulation, iters)
    if project == "SimCSE":
        # No pretrained weights (a download, read with torch).  LiBai's fused attention softmax is off: with
        # SimCSE's apply_query_key_layer_scaling=False LiBai passes it scale=None and SimCSE's int64 mask, which
        # OneFlow 0.9.0 refuses on every device (docs/upstream-bugs.md §31); LiBai's unfused path computes the same.
        model = [f"model.cfg.{k}={v}" for k, v in BERT.items()] + [
            "model.cfg.pretrained_model_weight=null", "model.cfg.scale_mask_softmax_fusion=False"]
        vocab = os.path.join(data, "vocab.txt")
        sts = {split: os.path.join(data, "STS", f"cnsd-sts-{split}.txt") for split in ("train", "dev", "test")}
        read = {"dataloader.train.dataset.0": dict(path=os.path.join(data, "SNLI", "train.txt"), path2=sts["train"],
                                                   max_len=32),
                "dataloader.test.0.dataset": dict(path=sts["test"]), "dataloader.test.1.dataset": dict(path=sts["dev"])}
        inputs = [f"tokenization.tokenizer.vocab_file={vocab}"]
        for where, keys in read.items():
            inputs += [f"{where}.{k}={v}" for k, v in dict(keys, **{"tokenizer.vocab_file": vocab}).items()]
    elif project == "MOCOV3":
        model = [f"model.{encoder}.{k}={v}" for encoder in ("base_encoder", "momentum_encoder")
                 for k, v in VIT.items()] + ["model.dim=16", "model.mlp_dim=64"]
        inputs = [f"dataloader.train.dataset.0.transform.base_transform{i}.transforms.0.size=32" for i in (1, 2)]
        inputs += [f"dataloader.train.dataset.0.root={data}", f"dataloader.test.0.dataset.root={data}"]
    else:
        model = [f"model.{k}={v}" for k, v in VIT.items()] + [
            "model.decoder_embed_dim=32", "model.decoder_depth=2", "model.decoder_num_heads=2"]
        inputs = ["dataloader.train.dataset.0.transform.transforms.0.size=[32,32]",
                  f"dataloader.train.dataset.0.root={data}"]
    if graph is not None:
        inputs.append(f"graph.enabled={graph}")
    return CPU + sizes + model + inputs


def project_data(work, text_root):
    """``{project: the data its run reads}``, written under ``work``."""
    from libai_ext.data import ensure_digits_imagenet

    imagenet = ensure_digits_imagenet(os.path.join(work, "imagenet"))
    llama = write_llama_data(text_root, os.path.join(work, "llama"))
    return {"MOCOV3": imagenet, "MAE": imagenet, "SimCSE": write_simcse_data(text_root, os.path.join(work, "simcse")),
            "Llama": llama, "Baichuan": llama, "Qwen": write_qwen_data(text_root, os.path.join(work, "qwen")),
            "ChatGLM": write_chatglm_data(text_root, os.path.join(work, "chatglm"))}
