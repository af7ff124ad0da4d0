"""On every rank, for each layout of ``--layouts`` in turn: build models as a trainer does, report their weights.

One launch covers several layouts of its world size (LiBai's layout is set up again for each),
so that OneFlow's start-up is paid once.  Per layout, one record per build:

* ``swin``: configs/demo_swin_digits_cpu.py's model from ``ConsistentBatchTrainer.build_model`` with
  train.randomness "layout_invariant" and "fast", and LiBai's ``DefaultTrainer.build_model`` (stock);
* ``gpt``, ``bert``, ``vit``, ``t5`` (and on LiBai main ``roberta``, whose embeddings build BERT's
  tables and replace them): LiBai's own models (tiny) inside ``build_with_seeded_init``;
* ``ema``: a LiBai ViT student with an EMA teacher made by ``copy.deepcopy``, a second copy made
  by ``load_state_dict`` and ``w * 0.5``, ``flow.cat([w, w])`` of a split weight ``w``, inside
  ``build_with_seeded_init``; the record says whether the copies equal the student and the
  derived tensors equal those ops on the student's weight, element for element, on this layout;
* ``project``: a trainer written as LiBai main's LLM projects write theirs (``ProjectTrainer``: ``build_model``
  overridden without calling the parent, a LiBai ViT built, pretrained weights loaded as LiBai's HuggingFace loader
  loads them, a LoRA adapter with an ``nn.Dropout`` added); the record says whether the loaded tensors equal the
  file's and how the adapter's dropout was converted;
* ``late`` (with ``--late``): ``ConsistentBatchTrainer.build_model`` of a model that creates a
  parameter in its first forward, under both modes: what the first forward raised or logged.

Every record holds, for every parameter and buffer whose placement includes this rank, a SHA-1
of the whole global value (gathered), so that layouts can be compared bit for bit.
"""
import argparse
import copy
import hashlib
import inspect
import logging
import math
import os
import re
import time

import libai.models
import numpy as np
import oneflow as flow
from libai.config import LazyCall, LazyConfig
from libai.engine import DefaultTrainer
from libai.layers import Linear
from libai.models import BertModel, GPTModel, T5Model, VisionTransformer, build_model
from oneflow import nn

from common import run_or_die, setup_layout
from libai_ext import ConsistentBatchTrainer, build_with_seeded_init, seed_from_config
from libai_ext.random.param_init import named_tensors
from libai.utils import distributed as dist
from libai_ext.testing import ranks_device, write_rank_result

SWIN_BUILDS = (("layout_invariant", ConsistentBatchTrainer, "layout_invariant"),
               ("fast", ConsistentBatchTrainer, "fast"),
               ("stock", DefaultTrainer, "layout_invariant"))
CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "demo_swin_digits_cpu.py")
SEED = 7
TEXT = dict(vocab_size=64, hidden_size=32, num_attention_heads=4, max_position_embeddings=16)
# LiBai 0.1.1's GPTModel counts its layers as num_layers, main's as hidden_layers.
GPT_LAYERS = "num_layers" if "num_layers" in inspect.signature(GPTModel.__init__).parameters else "hidden_layers"


def tiny_vit():
    return VisionTransformer(img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=4, num_classes=10)


LIBAI_MODELS = {
    "gpt": lambda: GPTModel(**{GPT_LAYERS: 2}, vocab_size=64, hidden_size=32, ffn_hidden_size=64,
                            num_attention_heads=4, max_seq_length=16),
    "bert": lambda: BertModel(hidden_layers=2, intermediate_size=64, hidden_dropout_prob=0.0,
                              attention_probs_dropout_prob=0.0, bias_gelu_fusion=False, bias_dropout_fusion=False,
                              scale_mask_softmax_fusion=False, **TEXT),
    "vit": tiny_vit,
    "t5": lambda: T5Model(hidden_layers=2, intermediate_size=64, embedding_dropout_prob=0.0, hidden_dropout_prob=0.0,
                          attention_probs_dropout_prob=0.0, **TEXT),
}
if hasattr(libai.models, "RobertaModel"):  # LiBai main
    LIBAI_MODELS["roberta"] = lambda: libai.models.RobertaModel(
        hidden_layers=2, intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        bias_gelu_fusion=False, bias_dropout_fusion=False, scale_mask_softmax_fusion=False, **TEXT)


class EMAPair(nn.Module):
    """A student, its EMA teacher (``copy.deepcopy``, as MoCo, BYOL and DINO make one), a copy
    loaded with ``load_state_dict`` from the student (built in the same recording), and two
    tensors derived from a tensor-parallel (split) weight of the student."""

    def __init__(self):
        super().__init__()
        self.student = tiny_vit()
        self.teacher = copy.deepcopy(self.student)
        self.loaded = tiny_vit()
        self.loaded.load_state_dict(self.student.state_dict())
        weight = self.student.blocks[0].mlp.dense_h_to_4h.weight
        self.halved = nn.Parameter(weight * 0.5)
        self.joined = nn.Parameter(flow.cat([weight, weight]))


class Adapter(nn.Module):
    """A LoRA adapter around a LiBai ``Linear``, as ChatGLM's ``lora/layers.py`` builds one: ``lora_A`` column-
    and ``lora_B`` row-parallel, A kaiming-uniform, B zeros, an ``nn.Dropout`` on the adapter's input."""

    def __init__(self, base, rank=4, p=0.1):
        super().__init__()
        self.base = base
        self.lora_A = Linear(base.in_features, rank, bias=False, parallel="col", layer_idx=-1)
        self.lora_B = Linear(rank, base.out_features, bias=False, parallel="row", layer_idx=-1)
        self.lora_dropout = nn.Dropout(p)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)

    def forward(self, x):
        return self.base(x) + self.lora_B(self.lora_A(self.lora_dropout(x)))


def pretrained_values(model):
    """The pretrained file's values for ``model``'s tensors (numpy's, the same on every layout)."""
    rng = np.random.RandomState(SEED)
    return {name: rng.standard_normal(tuple(tensor.shape)).astype(np.float32)
            for name, tensor in model.state_dict().items()}


def write_pretrained(path):
    """The pretrained file of a tiny ViT, written by rank 0 with ``flow.save`` (every rank builds the ViT)."""
    values = pretrained_values(tiny_vit())
    if flow.env.get_rank() == 0:
        flow.save({name: flow.tensor(value) for name, value in values.items()}, path)
    dist.synchronize()


def load_pretrained(model, path):
    """What LiBai main's model loaders do once the model is built (``base_loader.py``): the file read on rank 0,
    each tensor made global as the model's, then copied in by ``_load_from_state_dict``."""
    state = flow.load(path, global_src_rank=0)
    for name, tensor in model.state_dict().items():
        state[name] = flow.to_global(state[name], sbp=tensor.sbp, placement=tensor.placement)
    model.load_state_dict(state)


class ProjectTrainer(ConsistentBatchTrainer):
    """A trainer as LiBai main's LLM projects write theirs: ``build_model`` overridden without calling the parent,
    the model built and its weights loaded by a loader, then LoRA adapters added (ChatGLM's ``lora_enable``)."""
    pretrained = None  # the file's path

    @classmethod
    def build_model(cls, cfg):
        model = build_model(cfg.model)
        load_pretrained(model, cls.pretrained)
        model.head = Adapter(model.head)
        return model


def project_config():
    cfg = LazyConfig.load(CONFIG)
    cfg.model = LazyCall(tiny_vit)()
    cfg.train.seed = SEED
    return cfg


class LateParameter(nn.Module):
    """Creates a parameter in its first forward (never seen by the optimizer)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        if not hasattr(self, "lazy_scale"):
            self.lazy_scale = nn.Parameter(flow.ones(4))
        return x


def parse_layout(name):
    """"1", "tp2xpp2", "dp2xtp2", ... -> (dp, tp, pp)."""
    sizes = dict(dp=1, tp=1, pp=1)
    for kind, size in re.findall(r"(dp|tp|pp)(\d+)", name):
        sizes[kind] = int(size)
    return sizes["dp"], sizes["tp"], sizes["pp"]


def use_layout(name, layers):
    dp, tp, pp = parse_layout(name)
    setup_layout(argparse.Namespace(dp=dp, tp=tp, pp=pp, layers=layers))
    util = dist.get_dist_util()
    if hasattr(util, "set_device_type"):  # LiBai main: build_model's placements follow it (default "cuda")
        util.set_device_type(ranks_device())


def full_value(tensor):
    """The whole global tensor as numpy on the ranks of its placement (None elsewhere)."""
    tensor = tensor.detach()
    if not tensor.is_global:
        return tensor.numpy()
    whole = tensor.to_global(sbp=[flow.sbp.broadcast] * len(tensor.sbp))
    return whole.to_local().numpy() if flow.env.get_rank() in tensor.placement.ranks.flatten().tolist() else None


def digests(model):
    """{name: [sha1, std]} of every tensor this rank holds a part of."""
    found = {}
    for name, tensor in named_tensors(model):
        value = full_value(tensor)
        if value is not None:
            found[name] = [hashlib.sha1(value.tobytes()).hexdigest(), float(value.std())]
    return found


def build_swin(layout):
    for build, trainer, randomness in SWIN_BUILDS:
        cfg = LazyConfig.load(CONFIG)
        cfg.train.randomness = randomness
        seed_from_config(cfg)
        start = time.perf_counter()
        model = trainer.build_model(cfg)
        write_rank_result(layout=layout, model="swin", build=build, weights=digests(model),
                          seconds=time.perf_counter() - start)


def build_libai_models(layout):
    for name, build in LIBAI_MODELS.items():
        start = time.perf_counter()
        model, redrawn = build_with_seeded_init(build, SEED)
        write_rank_result(layout=layout, model=name, build="layout_invariant", redrawn=sorted(redrawn),
                          weights=digests(model), seconds=time.perf_counter() - start)


def build_ema(layout):
    start = time.perf_counter()
    model, redrawn = build_with_seeded_init(EMAPair, SEED)
    weights = digests(model)
    student = {n[len("student."):]: d for n, d in weights.items() if n.startswith("student.")}
    copies = {copy_name: sorted(n for n, d in student.items() if weights[f"{copy_name}.{n}"] != d)
              for copy_name in ("teacher", "loaded")}
    weight = full_value(model.student.blocks[0].mlp.dense_h_to_4h.weight)
    derived = None
    if weight is not None:  # this rank holds the first block's stage
        derived = {"halved": bool((full_value(model.halved) == weight * 0.5).all()),
                   "joined": bool((full_value(model.joined) == np.concatenate([weight, weight])).all())}
    write_rank_result(layout=layout, model="ema", build="layout_invariant", weights=weights,
                      compared=len(student), differ_from_student=copies, derived_exact=derived,
                      followers=sorted(n for n, recipe in redrawn.items() if "(follows student." in recipe),
                      seconds=time.perf_counter() - start)


def loaded_values():
    """{name in the adapted model: the file's value} (the ViT's head is the adapter's base)."""
    return {name.replace("head.", "head.base.", 1) if name.startswith("head.") else name: value
            for name, value in pretrained_values(tiny_vit()).items()}


def build_project(layout):
    start = time.perf_counter()
    model = ProjectTrainer.build_model(project_config())
    tensors, loaded = model.state_dict(), loaded_values()
    held = {name: full_value(tensors[name]) for name in loaded}
    differ = sorted(name for name, value in loaded.items()
                    if held[name] is not None and not np.array_equal(held[name], value))
    dropout = model.head.lora_dropout
    write_rank_result(layout=layout, model="project", build="layout_invariant", weights=digests(model),
                      differ_from_file=differ, dropout=[type(dropout).__module__, getattr(dropout, "stream", None)],
                      seconds=time.perf_counter() - start)


class Captured(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def build_late(layout):
    """The trainer's own build path with a parameter created in forward, under both modes."""
    for randomness in ("layout_invariant", "fast"):
        cfg = LazyConfig.load(CONFIG)
        cfg.model = LazyCall(LateParameter)()
        cfg.train.randomness = randomness
        model = ConsistentBatchTrainer.build_model(cfg)
        handler = Captured()
        logging.getLogger("libai_ext").addHandler(handler)
        try:
            model(flow.zeros(2, 4))
            raised = None
        except RuntimeError as error:
            raised = str(error)
        finally:
            logging.getLogger("libai_ext").removeHandler(handler)
        write_rank_result(layout=layout, model="late", build=randomness, raised=raised, warnings=handler.messages)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layouts", required=True, help="comma-separated: 1, tp2xpp2, dp2xtp2, ...")
    parser.add_argument("--models", default="swin,libai,ema,project")
    parser.add_argument("--pretrained", help="where rank 0 writes the pretrained file of ``project``")
    parser.add_argument("--layers", type=int, default=4, help="pipeline_num_layers")
    parser.add_argument("--late", action="store_true")
    args = parser.parse_args()
    builders = {"swin": build_swin, "libai": build_libai_models, "ema": build_ema, "project": build_project}
    ProjectTrainer.pretrained = args.pretrained
    for index, layout in enumerate(args.layouts.split(",")):
        use_layout(layout, args.layers)
        if index == 0 and "project" in args.models:
            write_pretrained(args.pretrained)
        for model in args.models.split(","):
            builders[model](layout)
        if args.late:
            build_late(layout)


if __name__ == "__main__":
    run_or_die(main)
