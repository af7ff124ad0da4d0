"""configs/libai_gpt2_cpu.py with an odd vocabulary that LiBai pads differently on each tensor-parallel size.

A byte-level BPE of 507 tokens (256 bytes, 250 merges, ``<|endoftext|>``) trained on the same
text, with its own indexed dataset built by LiBai's preprocess tool (under ``<text_data.root>_bpe250``),
read by LiBai's ``GPT2Tokenizer`` and ``GPT2Dataset``, and ``make_vocab_size_divisible_by=1``: LiBai
pads the vocabulary to 507 rows at tp1, 508 at tp2 and tp4.
"""
import os

from libai.config import LazyCall, LazyConfig

from libai_ext.data.text_data import text_data_file

_gpt2 = LazyConfig.load(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs",
                                     "libai_gpt2_cpu.py"))
train, optim, graph, dataloader, model, tokenization, text_data = (
    _gpt2.train, _gpt2.optim, _gpt2.graph, _gpt2.dataloader, _gpt2.model, _gpt2.tokenization, _gpt2.text_data)

BPE_MERGES = 250  # 256 bytes + 250 merges + <|endoftext|> = 507 tokens


def data_file(name):
    return LazyCall(text_data_file)(root="${text_data.root}_bpe250", name=name,
                                    libai_source="${text_data.libai_source}", bpe_merges=BPE_MERGES)


tokenization.tokenizer.vocab_file = data_file("gpt2_vocab")
tokenization.tokenizer.merges_file = data_file("gpt2_merges")
tokenization.make_vocab_size_divisible_by = 1
dataloader.train.dataset[0].data_prefix = data_file("gpt2_prefix")
dataloader.train.dataset[0].indexed_dataset.data_prefix = data_file("gpt2_prefix")
train.output_dir = "./output/libai_gpt2_vocab507"
