"""LiBai's own BERT pretraining (masked LM + sentence pairs), sized for CPU ranks, every dropout on.

LiBai's ``BertForPreTraining`` (4 layers, hidden 64, 4 heads, sequence 64, binary head on) on
LiBai's ``BertDataset``, read by ``build_nlp_train_val_test_loader`` from an mmap indexed dataset
that LiBai's ``tools/preprocess_data.py`` built from real English text with a WordPiece
vocabulary trained on it (``libai_ext.data.text_data``).

Sentences: ``BertDataset`` pairs consecutive sentences of a document, so its indexed dataset
needs documents of several sentences.  LiBai's tool splits sentences only with NLTK's Punkt
model, which it downloads at run time; offline, the tool runs over one sentence per line and
``libai_ext.data.text_data.group_into_documents`` puts the sentences back into their documents
(LiBai's own index writer, tokens unchanged).  The data are built on first use under
``text_data.root`` (``tools/make_text_data.py`` does it ahead).

    python -m oneflow.distributed.launch --nproc_per_node 1 tools/train_net.py \
        --config-file configs/libai_bert_cpu.py
    ... --nproc_per_node 2 ... train.dist.pipeline_parallel_size=2   # layers 0-1 | 2-3
    ... --nproc_per_node 2 ... train.dist.tensor_parallel_size=2

One file for LiBai 0.1.1 and main (``libai_ext.compat.nlp_api``).  The masked positions come from
LiBai's dataset, seeded per sample (``seed + index``), so they do not depend on the layout.

Randomness: ``hidden_dropout_prob`` 0.1 (embeddings, every layer's attention output and MLP
output) and ``attention_probs_dropout_prob`` 0.1.  Fusions: ``bias_dropout_fusion`` on (routed
to libai_ext's streams, CPU-capable); ``scale_mask_softmax_fusion`` on where the installed
LiBai's fused softmax drops out inside the op (main), off where it has no dropout and no CPU
kernel (0.1.1); ``bias_gelu_fusion`` off (no CPU kernel, no dropout).
"""
from libai.config import LazyCall
from libai.data.data_utils import get_indexed_dataset
from libai.data.datasets import BertDataset
from libai.models import BertForPreTraining, BertModel
from libai.tokenizer import BertTokenizer
from omegaconf import OmegaConf

from libai_ext.compat import nlp_api

from .common.graph import graph
from .common.optim import optim
from .common.text_data import data_file, text_data  # noqa: F401 (text_data: the config's key)
from .common.text_train import train


SEQ_LENGTH = 64
LAYERS = 4

tokenization = OmegaConf.create()
tokenization.tokenizer = LazyCall(BertTokenizer)(vocab_file=data_file("bert_vocab"), do_lower_case=True)
tokenization.append_eod = False
# LiBai pads vocab_size to a multiple of this x the tensor-parallel size: 2048 WordPiece tokens
# stay 2048 up to tp=16, so every layout trains the same model.
tokenization.make_vocab_size_divisible_by = 128

model = LazyCall(BertForPreTraining)(cfg=nlp_api.model_config(
    BertModel, layers=LAYERS,
    vocab_size=2048, hidden_size=64, intermediate_size=256, num_attention_heads=4,  # heads split over tp=2
    max_position_embeddings=SEQ_LENGTH, num_tokentypes=2, add_pooling_layer=True,
    hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
    bias_dropout_fusion=True,
    scale_mask_softmax_fusion=nlp_api.softmax_fusion_drops_out(),
    bias_gelu_fusion=False,
    apply_query_key_layer_scaling=True,
    wrapper_fields=dict(add_binary_head=True),  # the sentence-pair head (BertForPreTraining reads it)
))

dataloader = OmegaConf.create()
dataloader.train = nlp_api.train_val_test_loader(
    datasets=[nlp_api.dataset(
        BertDataset, name="bert",
        data_prefix=data_file("bert_prefix"),
        indexed_dataset=LazyCall(get_indexed_dataset)(data_prefix=data_file("bert_prefix"), data_impl="mmap",
                                                      skip_warmup=True),
        max_seq_length=SEQ_LENGTH,
        mask_lm_prob=0.15,
        short_seq_prob=0.1,
        binary_head=True,  # sentence pairs from multi-sentence documents
        masking_style="bert",  # main only (0.1.1 has one style)
        seed=1234,  # the trainer sets it to train.seed
    )],
    splits=[[90.0, 5.0, 5.0]],
)

train.output_dir = "./output/libai_bert_cpu"
# Transformer layer i has layer_idx i: pp2 puts layers 0-1 on stage 0, 2-3 on stage 1.
train.dist.pipeline_num_layers = LAYERS

optim.lr = 1e-3
