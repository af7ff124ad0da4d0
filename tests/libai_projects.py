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
PROJECTS = ("MOCOV3", "MAE", "SimCSE")

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
}
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
    LiBai checkout holding it, with LiBai main's ``configs/`` and ``tools/train_net.py``)."""
    from conftest import copy_from_libai_source

    folders = {project: os.path.join(dest, project) for project in PROJECTS}
    checkout = {"SimCSE": os.path.join("SimCSE", "projects", "SimCSE")}
    with tarfile.open(projects_archive()) as archive:
        for member in archive.getmembers():
            parts = member.name.split("/")
            if len(parts) > 2 and parts[1] == "projects" and parts[2] in PROJECTS and member.isfile():
                member.name = os.path.join(checkout.get(parts[2], parts[2]), *parts[3:])
                archive.extract(member, dest)
    copy_from_libai_source(folders["SimCSE"], lambda parts: parts[0] == "configs" or parts == ["tools", "train_net.py"])
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


CPU = ["train.dist.device_type=cpu", "train.input_placement_device=cpu", "train.rdma_enabled=False",
       "train.amp.enabled=False"]
VIT = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2)
BERT = dict(hidden_size=64, num_attention_heads=4, hidden_layers=2, intermediate_size=256, vocab_size=2048)
GLOBAL_BATCH = 8


def overrides(project, data, iters, dp=1, tp=1, pp=1, graph=None):
    """The CPU-sized run of ``project`` on ``data`` (MoCo and MAE: the digits in ImageNet's layout at 32 x 32 and a
    ViT of depth 2 and width 32; SimCSE: ``write_simcse_data``'s folder and a BERT of depth 2 and width 64),
    global batch 8 (MAE: 2 micro-batches a step, as its config accumulates; in graph mode 1, since OneFlow 0.9.0's
    CPU graphs with gradient accumulation now and then compute a wrong gradient, docs/upstream-bugs.md §32),
    ``iters`` iterations."""
    accumulation = 2 if project == "MAE" and not graph else 1
    layers = VIT["depth"] * (2 if project == "MAE" else 1)  # MAE's decoder blocks take layer_idx after the encoder's
    sizes = [f"train.dist.data_parallel_size={dp}", f"train.dist.tensor_parallel_size={tp}",
             f"train.dist.pipeline_parallel_size={pp}", f"train.dist.pipeline_num_layers={layers}",
             f"train.train_micro_batch_size={GLOBAL_BATCH // dp // accumulation}",
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
    return {"MOCOV3": imagenet, "MAE": imagenet, "SimCSE": write_simcse_data(text_root, os.path.join(work, "simcse"))}
