"""On every rank: LiBai's own GPT, BERT, ViT and T5 (tiny) built with seeded init; report their initial weights.

Each model is built inside ``build_with_seeded_init`` (train.seed 7).  One record per model: a SHA-1
of every tensor's whole global value (gathered) on the ranks of its placement, and the names
that were re-drawn, so that layouts can be compared bit for bit.
"""
import hashlib

import oneflow as flow
from libai.models import BertModel, GPTModel, T5Model, VisionTransformer

from common import layout_parser, run_or_die, setup_layout
from libai_ext import build_with_seeded_init
from libai_ext.random.param_init import named_tensors
from libai_ext.testing import write_rank_result

TEXT = dict(vocab_size=64, hidden_size=32, num_attention_heads=4, max_position_embeddings=16)
MODELS = {
    "gpt": lambda: GPTModel(num_layers=2, vocab_size=64, hidden_size=32, ffn_hidden_size=64, num_attention_heads=4,
                            max_seq_length=16),
    "bert": lambda: BertModel(hidden_layers=2, intermediate_size=64, hidden_dropout_prob=0.0,
                              attention_probs_dropout_prob=0.0, bias_gelu_fusion=False, bias_dropout_fusion=False,
                              scale_mask_softmax_fusion=False, **TEXT),
    "vit": lambda: VisionTransformer(img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=4, num_classes=10),
    "t5": lambda: T5Model(hidden_layers=2, intermediate_size=64, embedding_dropout_prob=0.0, hidden_dropout_prob=0.0,
                          attention_probs_dropout_prob=0.0, **TEXT),
}


def digest(tensor):
    tensor = tensor.detach()
    if tensor.is_global:
        whole = tensor.to_global(sbp=[flow.sbp.broadcast] * len(tensor.sbp))
        if flow.env.get_rank() not in tensor.placement.ranks.flatten().tolist():
            return None
        tensor = whole.to_local()
    return hashlib.sha1(tensor.numpy().tobytes()).hexdigest()


def main():
    setup_layout(layout_parser().parse_args())
    for name, build in MODELS.items():
        model, redrawn = build_with_seeded_init(build, 7)
        hashes = {n: digest(t) for n, t in named_tensors(model)}
        write_rank_result(model=name, redrawn=sorted(redrawn), weights={n: h for n, h in hashes.items() if h})


if __name__ == "__main__":
    run_or_die(main)
