"""configs/libai_gpt2_cpu.py with GPT-2's real vocabulary size, 50,257 tokens.

The config's 1,024-token BPE, its ``vocab.json`` padded with unused tokens to 50,257 entries (the
data keep their ids), read by LiBai's ``GPT2Tokenizer``; ``make_vocab_size_divisible_by=128`` as
in LiBai's GPT-2 configs: LiBai pads the vocabulary to 50,304 rows at tp1, 50,432 at tp2 and 50,688
at tp4.
"""
import json
import os

from libai.config import LazyCall, LazyConfig

from libai_ext.data.text_data import text_data_file

_gpt2 = LazyConfig.load(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs",
                                     "libai_gpt2_cpu.py"))
train, optim, graph, dataloader, model, tokenization, text_data = (
    _gpt2.train, _gpt2.optim, _gpt2.graph, _gpt2.dataloader, _gpt2.model, _gpt2.tokenization, _gpt2.text_data)

GPT2_TOKENS = 50257


def padded_vocab_file(vocab_file, size):
    """A copy of a GPT-2 ``vocab.json`` with unused tokens appended up to ``size`` entries, beside it
    (written once, atomically: every rank of a launch asks for it)."""
    path = os.path.join(os.path.dirname(vocab_file), f"vocab_{size}.json")
    if not os.path.exists(path):
        with open(vocab_file, encoding="utf-8") as f:
            entries = json.load(f)
        entries.update({f"<|unused_{i}|>": i for i in range(len(entries), size)})
        temporary = f"{path}.{os.getpid()}"
        with open(temporary, "w", encoding="utf-8") as f:
            json.dump(entries, f)
        os.replace(temporary, path)
    return path


tokenization.tokenizer.vocab_file = LazyCall(padded_vocab_file)(
    vocab_file=LazyCall(text_data_file)(root="${text_data.root}", name="gpt2_vocab",
                                        libai_source="${text_data.libai_source}"),
    size=GPT2_TOKENS)
train.output_dir = "./output/libai_gpt2_vocab50257"
