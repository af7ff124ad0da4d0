"""LiBai's own T5 pretraining (span corruption, encoder + decoder), sized for CPU ranks, every dropout on.

LiBai's ``T5ForPreTraining`` (2 encoder + 2 decoder layers, hidden 64, 4 heads, encoder sequence
64, decoder 32) on LiBai's ``T5Dataset``, read by ``build_nlp_train_val_test_loader`` from the
sentence-level indexed dataset of configs/libai_bert_cpu.py (LiBai's ``tools/preprocess_data.py``
over real English text, WordPiece vocabulary: ``libai_ext.data.text_data``).  The tokenizer is
LiBai's T5 set-up: a ``BertTokenizer`` with ``[BOS]``, ``[EOS]`` and 100 sentinels
``<extra_id_i>``, none of which the vocabulary file holds; ``libai_ext.compat.special_tokens``
adds them before the vocabulary is sized (LiBai 0.1.1 never adds them, main adds them after
the size is fixed: docs/upstream-bugs.md §22).

    python -m oneflow.distributed.launch --nproc_per_node 1 tools/train_net.py \
        --config-file configs/libai_t5_cpu.py
    ... --nproc_per_node 2 ... train.dist.pipeline_parallel_size=2   # encoder | decoder
    ... --nproc_per_node 2 ... train.dist.tensor_parallel_size=2

One file for LiBai 0.1.1 and main (``libai_ext.compat.nlp_api``: main's ``T5Dataset`` calls the
masking rate ``masked_lm_prob``, 0.1.1's ``mask_lm_prob``).  The masked spans come from LiBai's
dataset, seeded per sample (``seed + index``), so they do not depend on the layout.

Randomness: ``embedding_dropout_prob``, ``hidden_dropout_prob`` (every layer's attention and MLP
outputs) and ``attention_probs_dropout_prob`` 0.1.  Fusions as in configs/libai_bert_cpu.py.
"""
from libai.config import LazyCall
from libai.data.data_utils import get_indexed_dataset
from libai.data.datasets import T5Dataset
from libai.models import T5ForPreTraining, T5Model
from libai.tokenizer import BertTokenizer
from omegaconf import OmegaConf

from libai_ext.compat import nlp_api

from .common.graph import graph
from .common.optim import optim
from .common.text_data import data_file, text_data  # noqa: F401 (text_data: the config's key)
from .common.text_train import train


SEQ_LENGTH, DECODER_SEQ_LENGTH = 64, 32
LAYERS = 2  # per stack: layer_idx 0-1 the encoder, 2-3 the decoder

tokenization = OmegaConf.create()
# LiBai's own T5 tokenizer set-up (configs/common/data/t5_dataset.py of LiBai main).
tokenization.tokenizer = LazyCall(BertTokenizer)(
    vocab_file=data_file("bert_vocab"), do_lower_case=True,
    bos_token="[BOS]", eos_token="[EOS]", additional_special_tokens=[f"<extra_id_{i}>" for i in range(100)],
)
tokenization.append_eod = False
# 2048 WordPiece tokens + 102 special tokens = 2150, even: LiBai's padding to a multiple of this x
# the tensor-parallel size leaves the model unchanged on tp1 and tp2.
tokenization.make_vocab_size_divisible_by = 1

model = LazyCall(T5ForPreTraining)(cfg=nlp_api.model_config(
    T5Model, layers=LAYERS,
    vocab_size=2150, hidden_size=64, intermediate_size=256, num_attention_heads=4,  # heads split over tp=2
    max_position_embeddings=SEQ_LENGTH,
    embedding_dropout_prob=0.1, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
    bias_dropout_fusion=True,
    scale_mask_softmax_fusion=nlp_api.softmax_fusion_drops_out(),
    bias_gelu_fusion=False,
    apply_query_key_layer_scaling=True,
))

dataloader = OmegaConf.create()
dataloader.train = nlp_api.train_val_test_loader(
    datasets=[nlp_api.dataset(
        T5Dataset, name="t5",
        data_prefix=data_file("bert_prefix"),
        indexed_dataset=LazyCall(get_indexed_dataset)(data_prefix=data_file("bert_prefix"), data_impl="mmap",
                                                      skip_warmup=True),
        max_seq_length=SEQ_LENGTH,
        max_seq_length_dec=DECODER_SEQ_LENGTH,
        masked_lm_prob=0.15,
        short_seq_prob=0.1,
        seed=1234,  # the trainer sets it to train.seed
    )],
    splits=[[90.0, 5.0, 5.0]],
)

train.output_dir = "./output/libai_t5_cpu"
# Encoder layers have layer_idx 0-1, decoder layers 2-3: pp2 puts the encoder on stage 0.
train.dist.pipeline_num_layers = 2 * LAYERS

optim.lr = 1e-3
