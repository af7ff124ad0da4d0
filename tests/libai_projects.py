"""LiBai main's projects (MoCo v3, MAE, SimCSE) as shipped, for the tests: their folders taken from an archive of
LiBai main at the pinned commit, the user's adoption of the plugin written into a copy of each script, the data
they read, and the command-line overrides that size them for CPU ranks.

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

The projects import torch at module level for their PyTorch checkpoint converters, which these runs never call;
``tests/project_stubs/torch`` stands in for that import (any use of it raises).
"""
import json
import os
import shutil
import tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_STAND_IN = os.path.join(ROOT, "tests", "project_stubs")
PROJECTS = ("MOCOV3", "MAE", "SimCSE", "ChatGLM")

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
CHATGLM_SCRIPT = "projects/ChatGLM/train_net.py"
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
    "SimCSE": ("tools/train_net.py", [  # LiBai's own script: its trainer is DefaultTrainer itself
        IMPORT,
        ("    trainer = DefaultTrainer(cfg)\n", "    trainer = libai_ext.ConsistentBatchTrainer(cfg)\n"),
        APPLY_PATCHES,
        (LIBAI_SEEDING, "    libai_ext.seed_from_config(cfg)\n"),
    ]),
    "ChatGLM": (CHATGLM_SCRIPT, [  # run from a LiBai checkout, as its readme does: it imports projects.ChatGLM
        IMPORT,
        ("class ChatGLMTrainer(DefaultTrainer):", "class ChatGLMTrainer(libai_ext.ConsistentBatchTrainer):"),
        APPLY_PATCHES,
        (MAE_SEEDING, "    libai_ext.seed_from_config(cfg)\n"),  # MAE's seeding block, line for line
    ]),
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
    "ChatGLM": {CHATGLM_SCRIPT: [IMPORT, APPLY_PATCHES, ("    flow.cuda.manual_seed(seed_for_rank)\n", "")]},
}
# A run of a project with its own overrides: ChatGLM's SFT with LoRA (its dropout on) and the model's dropout on
VARIANTS = {"ChatGLM-LoRA": ("ChatGLM", ["model.cfg.lora_enable=True", "model.cfg.lora_cfg.lora_dropout=0.1",
                                         "model.cfg.hidden_dropout=0.1"])}
LIBAI_SOURCE = "libai_main_source"  # beside the projects: LiBai main's libai/ as a checkout has it
ADOPTED_SUFFIX = "_libai_ext.py"


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
    LiBai checkout holding it, with LiBai main's ``configs/`` and ``tools/train_net.py``; ChatGLM's: one with
    ``configs/``), and LiBai main's ``libai/`` as a source checkout has it in ``dest/LIBAI_SOURCE``
    (``libai_source_first``)."""
    from conftest import copy_from_libai_source

    folders = {project: os.path.join(dest, project) for project in PROJECTS}
    checkout = {project: os.path.join(project, "projects", project) for project in ("SimCSE", "ChatGLM")}
    with tarfile.open(projects_archive()) as archive:
        for member in archive.getmembers():
            parts = member.name.split("/")
            if len(parts) > 2 and parts[1] == "projects" and parts[2] in PROJECTS and member.isfile():
                member.name = os.path.join(checkout.get(parts[2], parts[2]), *parts[3:])
                archive.extract(member, dest)
    copy_from_libai_source(folders["SimCSE"], lambda parts: parts[0] == "configs" or parts == ["tools", "train_net.py"])
    copy_from_libai_source(folders["ChatGLM"], lambda parts: parts[0] == "configs")
    copy_from_libai_source(os.path.join(dest, LIBAI_SOURCE), lambda parts: parts[0] == "libai")
    for project in PROJECTS:
        assert os.path.isfile(os.path.join(folders[project], SCRIPTS[project][0])), (project, dest)
    return folders


def libai_source_first(env, projects):
    """``env`` for a launch running LiBai main from its source, as LiBai's docs install it (``pip install -e .``):
    ChatGLM imports ``libai.inference``, which pip's install of LiBai main lacks (the folder has no
    ``__init__.py``).  The source goes first on ``PYTHONPATH`` for every run of the launch, since a process holds
    one ``libai`` (the installed one is the same commit's code, without that folder).  LiBai's start-up compile
    step then runs ``make`` in the source's ``libai/data/data_utils``, as in a checkout: it needs pybind11, which
    this interpreter's folder holds, first on ``PATH``."""
    import sys

    source = os.path.join(os.path.dirname(projects["ChatGLM"]), LIBAI_SOURCE)
    return dict(env, PYTHONPATH=os.pathsep.join(filter(None, [source, env.get("PYTHONPATH")])),
                PATH=os.pathsep.join(filter(None, [os.path.dirname(sys.executable), env.get("PATH")])))


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


CPU = ["train.dist.device_type=cpu", "train.input_placement_device=cpu", "train.rdma_enabled=False",
       "train.amp.enabled=False"]
VIT = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2)
BERT = dict(hidden_size=64, num_attention_heads=4, hidden_layers=2, intermediate_size=256, vocab_size=2048)
GLOBAL_BATCH = 8
CHATGLM_GLOBAL_BATCH = 16
CHATGLM_ACCUMULATION = 8  # as chatglm_sft.py ships


def project_of(run):
    """The project folder of a run name (``VARIANTS``: a project with overrides of its own)."""
    return VARIANTS[run][0] if run in VARIANTS else run


def accumulation_of(project, graph):
    """Micro-batches a step: MAE's 2 and ChatGLM's 8 as their configs set, but 1 in graph mode (``overrides``)."""
    if graph or (graph is None and project_of(project) == "ChatGLM"):  # chatglm_sft.py ships graph mode on
        return 1
    return {"MAE": 2, "ChatGLM": CHATGLM_ACCUMULATION}.get(project_of(project), 1)


def overrides(project, data, iters, dp=1, tp=1, pp=1, graph=None):
    """The CPU-sized run of ``project`` (or a ``VARIANTS`` run) on ``data`` (MoCo and MAE: the digits in ImageNet's
    layout at 32 x 32 and a ViT of depth 2 and width 32; SimCSE: ``write_simcse_data``'s folder and a BERT of depth
    2 and width 64; ChatGLM: ``write_chatglm_checkpoint``'s model, ``CHATGLM``, on ``write_chatglm_data``'s
    samples of 64 tokens), global batch 8 (ChatGLM: 16), ``iters`` iterations.  MAE takes 2 micro-batches a step
    and ChatGLM 8, as their configs accumulate; in graph mode 1, since OneFlow 0.9.0's CPU graphs with gradient
    accumulation now and then compute a wrong gradient (docs/upstream-bugs.md §32)."""
    accumulation = accumulation_of(project, graph)
    batch = CHATGLM_GLOBAL_BATCH if project_of(project) == "ChatGLM" else GLOBAL_BATCH
    layers = {"MAE": 2 * VIT["depth"],  # MAE's decoder blocks take layer_idx after the encoder's
              "ChatGLM": CHATGLM["num_layers"]}.get(project_of(project), VIT["depth"])
    sizes = [f"train.dist.data_parallel_size={dp}", f"train.dist.tensor_parallel_size={tp}",
             f"train.dist.pipeline_parallel_size={pp}", f"train.dist.pipeline_num_layers={layers}",
             f"train.train_micro_batch_size={batch // dp // accumulation}",
             f"train.num_accumulation_steps={accumulation}",
             f"train.train_iter={iters}", "train.train_epoch=0", "train.log_period=1", "train.seed=1234",
             "train.checkpointer.period=100000", "dataloader.train.num_workers=0", "train.evaluation.enabled=False"]
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
    elif project_of(project) == "ChatGLM":
        # DATA_DIR and CHATGLM_HF_DIR (``chatglm_env``) name the folders; the model's weights come from the folder
        # CHATGLM_HF_DIR names too, which chatglm_config.py leaves at a relative "chatglm/chatglm2-6b"
        model = [f"model.cfg.pretrained_model_path={os.path.join(data, 'hf')}", *VARIANTS.get(project, ("", []))[1]]
        inputs = [f"dataloader.train.dataset.0.{k}={v}"
                  for k, v in dict(max_source_len=32, max_target_len=31, max_length=64).items()]
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
    chatglm = os.path.join(work, "chatglm")
    write_chatglm_checkpoint(text_root, os.path.join(chatglm, "hf"))
    write_chatglm_data(text_root, os.path.join(chatglm, "sft"))
    return {"MOCOV3": imagenet, "MAE": imagenet, "SimCSE": write_simcse_data(text_root, os.path.join(work, "simcse")),
            "ChatGLM": chatglm}


def chatglm_env(data):
    """The environment variables chatglm_sft.py reads when it loads, for ``project_data``'s ChatGLM folder."""
    return {"DATA_DIR": os.path.join(data, "sft"), "CHATGLM_HF_DIR": os.path.join(data, "hf")}


# ChatGLM's HuggingFace checkpoint at CPU size: ChatGLM3's architecture (rotary, RMSNorm, multi-query attention
# with 2 groups, SwiGLU, QKV bias only) with 2 layers of width 64.  The dropouts are left out of config.json (HF's
# has them at 0.0), so that the LiBai config's values stand and an override sets them: LiBai's loader overwrites
# model.cfg with every key config.json holds.
CHATGLM = dict(num_layers=2, hidden_size=64, num_attention_heads=4, kv_channels=16, ffn_hidden_size=128,
               multi_query_attention=True, multi_query_group_num=2, padded_vocab_size=512, seq_length=64,
               layernorm_epsilon=1e-5, rmsnorm=True, add_bias_linear=False, add_qkv_bias=True,
               apply_query_key_layer_scaling=True, attention_softmax_in_fp32=True,
               apply_residual_connection_post_layernorm=False, fp32_residual_connection=False,
               post_layer_norm=True, tie_word_embeddings=False, eos_token_id=2, pad_token_id=0)
CHATGLM_SENTENCEPIECE_SIZE = 500  # + ChatGLM's 9 special tokens after it: 509 ids within the 512 rows


def chatglm_hf_weights(cfg, seed=0):
    """``{HF ChatGLM key: float32 array}`` of ``cfg``'s sizes, drawn from a fixed numpy seed."""
    import numpy as np

    rng = np.random.RandomState(seed)
    hidden, head = cfg["hidden_size"], cfg["kv_channels"]
    qkv = cfg["num_attention_heads"] * head + 2 * cfg["multi_query_group_num"] * head
    shapes = {"transformer.embedding.word_embeddings.weight": (cfg["padded_vocab_size"], hidden),
              "transformer.encoder.final_layernorm.weight": (hidden,),
              "transformer.output_layer.weight": (cfg["padded_vocab_size"], hidden)}
    for i in range(cfg["num_layers"]):
        layer = f"transformer.encoder.layers.{i}."
        shapes.update({layer + "input_layernorm.weight": (hidden,),
                       layer + "self_attention.query_key_value.weight": (qkv, hidden),
                       layer + "self_attention.query_key_value.bias": (qkv,),
                       layer + "self_attention.dense.weight": (hidden, cfg["num_attention_heads"] * head),
                       layer + "post_attention_layernorm.weight": (hidden,),
                       layer + "mlp.dense_h_to_4h.weight": (2 * cfg["ffn_hidden_size"], hidden),
                       layer + "mlp.dense_4h_to_h.weight": (hidden, cfg["ffn_hidden_size"])})
    weights = {key: (1 + 0.1 * rng.standard_normal(shape) if key.endswith("layernorm.weight")
                     else 0.02 * rng.standard_normal(shape)).astype(np.float32) for key, shape in shapes.items()}
    # HF's checkpoint holds the rotary frequencies too; LiBai's converter drops them
    weights["transformer.rotary_pos_emb.inv_freq"] = (
        1.0 / 10000 ** (np.arange(0, head // 2, 2, dtype=np.float32) / (head // 2)))
    return weights


def write_chatglm_checkpoint(text_root, dest):
    """A HuggingFace ChatGLM folder at ``dest`` as ``CHATGLM_HF_DIR`` names it: ``config.json``, ``model.safetensors``
    (``chatglm_hf_weights``) and ``tokenizer.model``, a SentencePiece model trained on the sentences of
    ``libai_ext.data.text_data`` at ``text_root`` (unk, bos, eos at 0, 1, 2, as ChatGLM's tokenizer and config
    expect; the tokenizer numbers its own special tokens after the model's pieces)."""
    import sentencepiece
    from safetensors.numpy import save_file

    from libai_ext.data.text_data import FILES

    os.makedirs(dest, exist_ok=True)
    with open(os.path.join(text_root, FILES["sentences"])) as f:
        text = [json.loads(line)["text"] for line in f]
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(text), model_prefix=os.path.join(dest, "tokenizer"),
        vocab_size=CHATGLM_SENTENCEPIECE_SIZE, model_type="bpe", num_threads=1, unk_id=0, bos_id=1, eos_id=2,
        pad_id=-1, minloglevel=2)
    os.remove(os.path.join(dest, "tokenizer.vocab"))
    with open(os.path.join(dest, "config.json"), "w") as f:
        json.dump(dict(CHATGLM, architectures=["ChatGLMModel"], model_type="chatglm", torch_dtype="float32"), f,
                  indent=1)
    save_file(chatglm_hf_weights(CHATGLM), os.path.join(dest, "model.safetensors"), metadata={"format": "pt"})
    return dest


def write_chatglm_data(text_root, dest, samples=200):
    """ChatGLM's SFT data as its ``ChatGLMTrainDataset`` reads it, under ``dest`` (``DATA_DIR``): ``train.json`` and
    ``test.json``, ``{"prompt": [...], "query": [...], "response": [...]}``, each pair of consecutive real sentences
    of ``libai_ext.data.text_data`` a query and its response."""
    from libai_ext.data.text_data import FILES

    with open(os.path.join(text_root, FILES["sentences"])) as f:
        text = [json.loads(line)["text"] for line in f]
    os.makedirs(dest, exist_ok=True)
    for split, first in (("train", 0), ("test", 2 * samples)):
        pairs = range(first, first + 2 * samples, 2)
        with open(os.path.join(dest, f"{split}.json"), "w") as f:
            json.dump({"prompt": ["Continue: " for _ in pairs], "query": [text[i] for i in pairs],
                       "response": [text[i + 1] for i in pairs]}, f)
    return dest
