"""LiBai main's HuggingFace loaders need PyTorch to read safetensors weights, which are plain arrays.

    python tools/repro/hf_loader_torch.py      # one process, ~10 s, LiBai main, in a venv without torch

`ModelLoaderHuggerFace._load_torch_state_dict` opens safetensors files with `framework="pt"` (and imports torch
first): without PyTorch a Llama, ChatGLM, Qwen or Baichuan checkpoint cannot be loaded at all.  Runs stock LiBai's
loader only (`libai_ext` not imported).
"""
import os
import tempfile

import numpy as np
from safetensors.numpy import save_file

from _common import libai_version, message, verdict

from libai.models.utils.model_loader.base_loader import ModelLoaderHuggerFace

path = os.path.join(tempfile.mkdtemp(), "model.safetensors")
save_file({"w": np.ones((2, 2), np.float32)}, path)
try:
    ModelLoaderHuggerFace._load_torch_state_dict(object.__new__(ModelLoaderHuggerFace), [path], use_safetensors=True)
    error = None
except ImportError as caught:
    error = caught
print(f"libai {libai_version()}: {message(error) if error else 'read without torch'}")
verdict(error is not None, "a safetensors checkpoint needs torch to be read")
