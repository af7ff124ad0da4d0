"""LiBai's T5 set-up loses its special tokens: [UNK] on 0.1.1, ids past the embedding on main.

    python tools/repro/t5_special_tokens.py   # one process, ~15 s

LiBai's T5 config gives a `BertTokenizer` `bos_token="[BOS]"`, `eos_token="[EOS]"` and 100 sentinels
`<extra_id_i>`; a BERT vocabulary has none of them.  `DefaultTrainer.build_tokenizer` sizes the model's
vocabulary from `len(tokenizer)` (padded to `make_vocab_size_divisible_by` x tp; 1 here).  0.1.1's
`T5Dataset` then reads `bos_token_id` & co., all [UNK]; main's `T5Dataset` adds the tokens itself, after
that size was fixed, so the decoder's first token lies past the embedding's rows.  Runs stock LiBai's
calls only (`libai_ext` not imported).
"""
import os
import tempfile

import numpy as np
import oneflow as flow
from omegaconf import OmegaConf

from _common import libai_version, verdict

from libai.config import LazyCall
from libai.data.data_utils import get_indexed_dataset
from libai.data.data_utils.indexed_dataset import make_builder
from libai.data.datasets import T5Dataset
from libai.engine import DefaultTrainer
from libai.tokenizer import BertTokenizer

WORDS = "the cat sat on a mat and dog ran to big red house".split()
folder = tempfile.mkdtemp()
vocab_file = os.path.join(folder, "vocab.txt")
with open(vocab_file, "w") as f:
    f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")

cfg = OmegaConf.create()
cfg.tokenization = OmegaConf.create(dict(append_eod=False, make_vocab_size_divisible_by=1))
cfg.tokenization.tokenizer = LazyCall(BertTokenizer)(vocab_file=vocab_file, bos_token="[BOS]", eos_token="[EOS]",
                                                     additional_special_tokens=[f"<extra_id_{i}>" for i in range(100)])
cfg.model = OmegaConf.create(dict(cfg=dict(vocab_size=0)))
cfg.train = OmegaConf.create(dict(dist=dict(tensor_parallel_size=1)))
tokenizer = DefaultTrainer.build_tokenizer(cfg)
vocab_size = cfg.model.cfg.vocab_size

# A sentence-level indexed dataset of 4 documents x 3 sentences of vocabulary words.
prefix = os.path.join(folder, "t5_text_sentence")
builder = make_builder(prefix + ".bin", "mmap", vocab_size=len(WORDS) + 5)
rng = np.random.RandomState(0)
for _ in range(4):
    for _ in range(3):
        builder.add_item(flow.tensor(rng.randint(5, 5 + len(WORDS), size=12), dtype=flow.int64))
    builder.end_document()
builder.finalize(prefix + ".idx")
indexed = get_indexed_dataset(prefix, "mmap", True)

args = dict(tokenizer=tokenizer, data_prefix=prefix, indexed_dataset=indexed, max_seq_length=32,
            max_seq_length_dec=16, short_seq_prob=0.0, seed=1)
if "max_num_samples" in T5Dataset.__init__.__code__.co_varnames:  # main
    dataset = T5Dataset(name="t5", max_num_samples=8, masked_lm_prob=0.15, **args)
else:
    dataset = T5Dataset(mask_lm_prob=0.15, **args)
decoder_ids = dataset[0].get("decoder_input_ids").tensor
decoder_start = int(np.asarray(decoder_ids.numpy() if hasattr(decoder_ids, "numpy") else decoder_ids)[0])

unk = tokenizer.unk_token_id
all_unknown = tokenizer.bos_token_id == unk and set(tokenizer.additional_special_tokens_ids) == {unk}
past_embedding = decoder_start >= vocab_size
verdict(all_unknown or past_embedding,
        f"libai {libai_version()}: model vocab_size {vocab_size}, tokenizer now {len(tokenizer)} tokens; "
        f"[BOS] id {tokenizer.bos_token_id}, sentinel ids {sorted(set(tokenizer.additional_special_tokens_ids))[:3]}..., "
        f"[UNK] id {unk}; the decoder's first token {decoder_start}"
        + (" = [UNK]" if all_unknown else " >= vocab_size: past the embedding" if past_embedding else ""))
