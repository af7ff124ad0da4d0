"""LiBai's own GPT-2 pretraining, sized for CPU ranks, every dropout on.

LiBai's ``GPTForPreTraining`` (4 layers, hidden 64, 4 heads, sequence 64) on LiBai's
``GPT2Dataset``, read by ``build_nlp_train_val_test_loader`` from an mmap indexed dataset that
LiBai's ``tools/preprocess_data.py`` built from real English text (``libai_ext.data.text_data``:
scikit-learn's dataset descriptions and CPython's reference documentation, with a byte-level
BPE in GPT-2's file format trained on them).  The data are built on first use under
``text_data.root`` (about half a minute; ``tools/make_text_data.py`` does it ahead).

    # 1 rank
    python -m oneflow.distributed.launch --nproc_per_node 1 tools/train_net.py \
        --config-file configs/libai_gpt2_cpu.py
    # 2-stage pipeline (the 4 layers split 2 + 2), tensor parallel, (dp, tp, pp) = (2, 2, 2)
    ... --nproc_per_node 2 ... train.dist.pipeline_parallel_size=2
    ... --nproc_per_node 2 ... train.dist.tensor_parallel_size=2
    ... --nproc_per_node 8 ... train.dist.data_parallel_size=2 train.dist.tensor_parallel_size=2 \
        train.dist.pipeline_parallel_size=2

The same file runs on LiBai 0.1.1 and LiBai main: ``libai_ext.compat.nlp_api`` gives each line its
own dataset, loader and model-config arguments.  Add ``train.trainer=libai.engine.DefaultTrainer``
for stock LiBai.

Randomness: dropout 0.1 after the embeddings, on the attention probabilities and on every
layer's outputs.  Fusions: ``bias_dropout_fusion`` on (LiBai's fused bias-add + dropout, which
libai_ext draws from its streams and runs on CPU); ``scale_mask_softmax_fusion`` on where the
installed LiBai's fused softmax drops out inside the op (main), off where it is a softmax
without dropout that has no CPU kernel (0.1.1); ``bias_gelu_fusion`` off (no CPU kernel, no
dropout).
"""
from libai.config import LazyCall
from libai.data.data_utils import get_indexed_dataset
from libai.data.datasets import GPT2Dataset
from libai.models import GPTForPreTraining, GPTModel
from libai.tokenizer import GPT2Tokenizer
from omegaconf import OmegaConf

from libai_ext.compat import nlp_api

from .common.graph import graph
from .common.optim import optim
from .common.text_data import data_file, text_data  # noqa: F401 (text_data: the config's key)
from .common.text_train import train


SEQ_LENGTH = 64
LAYERS = 4

tokenization = OmegaConf.create()
tokenization.tokenizer = LazyCall(GPT2Tokenizer)(vocab_file=data_file("gpt2_vocab"),
                                                 merges_file=data_file("gpt2_merges"))
tokenization.append_eod = False  # LiBai 0.1.1's GPT2Tokenizer has no end-of-document token
# LiBai pads vocab_size to a multiple of this x the tensor-parallel size: 1024 BPE symbols stay
# 1024 up to tp=8, so every layout trains the same model.
tokenization.make_vocab_size_divisible_by = 128

model = LazyCall(GPTForPreTraining)(cfg=nlp_api.model_config(
    GPTModel, layers=LAYERS,
    vocab_size=1024, hidden_size=64, ffn_hidden_size=256, num_attention_heads=4,  # heads split over tp=2
    max_seq_length=SEQ_LENGTH,
    embedding_dropout_prob=0.1, attention_dropout_prob=0.1, output_dropout_prob=0.1,
    bias_dropout_fusion=True,
    scale_mask_softmax_fusion=nlp_api.softmax_fusion_drops_out(),
    bias_gelu_fusion=False,
    apply_query_key_layer_scaling=True,
))

dataloader = OmegaConf.create()
dataloader.train = nlp_api.train_val_test_loader(
    datasets=[nlp_api.dataset(
        GPT2Dataset, name="gpt-2",
        data_prefix=data_file("gpt2_prefix"),
        indexed_dataset=LazyCall(get_indexed_dataset)(data_prefix=data_file("gpt2_prefix"), data_impl="mmap",
                                                      skip_warmup=True),
        max_seq_length=SEQ_LENGTH,
        seed=1234,  # main: the document shuffle of its index maps (the trainer sets it to train.seed)
    )],
    # 91 documents: about 82 for training, 5 for validation, 4 for the test split.
    splits=[[90.0, 5.0, 5.0]],
)

train.output_dir = "./output/libai_gpt2_cpu"
# Transformer layer i has layer_idx i: pp2 puts layers 0-1 on stage 0, 2-3 on stage 1.
train.dist.pipeline_num_layers = LAYERS

optim.lr = 1e-3
