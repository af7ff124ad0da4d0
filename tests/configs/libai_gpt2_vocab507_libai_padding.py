"""tests/configs/libai_gpt2_vocab507.py with LiBai's padding (``tokenization.max_tensor_parallel_size=1``): 507 rows
on 1 rank, LiBai's 508 on tp2 and tp4 (with a warning), another model there (tests/test_vocab_padding.py)."""
import os

from libai.config import LazyConfig

_base = LazyConfig.load(os.path.join(os.path.dirname(os.path.abspath(__file__)), "libai_gpt2_vocab507.py"))
train, optim, graph, dataloader, model, tokenization, text_data = (
    _base.train, _base.optim, _base.graph, _base.dataloader, _base.model, _base.tokenization, _base.text_data)
tokenization.max_tensor_parallel_size = 1
train.output_dir = "./output/libai_gpt2_vocab507_libai_padding"
