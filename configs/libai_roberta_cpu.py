"""LiBai main's own RoBERTa pretraining (masked LM), sized for CPU ranks, every dropout on.

``libai.models.RobertaForPreTraining`` (LiBai main only; 4 layers, hidden 64, 4 heads, sequence 64)
on LiBai's ``RobertaDataset``, read by ``build_nlp_train_val_test_loader`` from a sentence-level
indexed dataset that LiBai's ``tools/preprocess_data.py`` built from real English text, with the
byte-level BPE of configs/libai_gpt2_cpu.py in RoBERTa's layout (``<s>``, ``<pad>``, ``</s>``,
``<unk>`` first, ``<mask>`` last: ``libai_ext.data.text_data``).

    python -m oneflow.distributed.launch --nproc_per_node 1 tools/train_net.py \
        --config-file configs/libai_roberta_cpu.py
    ... --nproc_per_node 2 ... train.dist.pipeline_parallel_size=2   # layers 0-1 | 2-3
    ... --nproc_per_node 2 ... train.dist.tensor_parallel_size=2

The masked positions come from LiBai's dataset, seeded per sample (``seed + index``), so they do
not depend on the layout.  RoBERTa numbers positions from ``pad_token_id + 1``: the position table
has two rows more than the longest sequence.

Randomness: ``hidden_dropout_prob`` 0.1 (embeddings, every layer's attention output and MLP
output) and ``attention_probs_dropout_prob`` 0.1.  Fusions: ``bias_dropout_fusion`` and the fused
softmax on (routed to libai_ext's streams, CPU-capable); ``bias_gelu_fusion`` off (no CPU kernel,
no dropout).
"""
from libai.config import LazyCall
from libai.data.data_utils import get_indexed_dataset
from libai.data.datasets import RobertaDataset
from libai.models import RobertaForPreTraining, RobertaModel
from libai.tokenizer import RobertaTokenizer
from omegaconf import OmegaConf

from libai_ext.compat import nlp_api

from .common.graph import graph
from .common.optim import optim
from .common.text_data import data_file, text_data  # noqa: F401 (text_data: the config's key)
from .common.text_train import train


SEQ_LENGTH = 64
LAYERS = 4

tokenization = OmegaConf.create()
tokenization.tokenizer = LazyCall(RobertaTokenizer)(vocab_file=data_file("roberta_vocab"),
                                                    merges_file=data_file("roberta_merges"))
tokenization.append_eod = False
# 1028 tokens (4 + 1023 BPE symbols + <mask>): LiBai's padding to a multiple of this x the
# tensor-parallel size leaves the model unchanged on tp1, tp2 and tp4.
tokenization.make_vocab_size_divisible_by = 1

model = LazyCall(RobertaForPreTraining)(cfg=nlp_api.model_config(
    RobertaModel, layers=LAYERS,
    vocab_size=1028, hidden_size=64, intermediate_size=256, num_attention_heads=4,  # heads split over tp=2
    max_position_embeddings=SEQ_LENGTH + 2, num_tokentypes=1, add_pooling_layer=True, pad_token_id=1,
    hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
    bias_dropout_fusion=True,
    scale_mask_softmax_fusion=True,
    bias_gelu_fusion=False,
    apply_query_key_layer_scaling=True,
))

dataloader = OmegaConf.create()
dataloader.train = nlp_api.train_val_test_loader(
    datasets=[nlp_api.dataset(
        RobertaDataset, name="roberta",
        data_prefix=data_file("roberta_prefix"),
        indexed_dataset=LazyCall(get_indexed_dataset)(data_prefix=data_file("roberta_prefix"), data_impl="mmap",
                                                      skip_warmup=True),
        max_seq_length=SEQ_LENGTH,
        mask_lm_prob=0.15,
        short_seq_prob=0.1,
        masking_style="bert",
        seed=1234,  # the trainer sets it to train.seed
    )],
    splits=[[90.0, 5.0, 5.0]],
)

train.output_dir = "./output/libai_roberta_cpu"
# Transformer layer i has layer_idx i: pp2 puts layers 0-1 on stage 0, 2-3 on stage 1.
train.dist.pipeline_num_layers = LAYERS

optim.lr = 1e-3
