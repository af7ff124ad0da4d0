#!/usr/bin/env python
"""``libai-ext-gpu-check`` from a checkout (``make gpu-check``): check libai_ext on this machine's GPUs.
The tool is ``libai_ext.cli.gpu_check``; ``--help`` says how to use it.

    python tools/gpu_check.py            # refuses (exit code 2) where OneFlow sees no CUDA device
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from libai_ext.cli.gpu_check import main  # noqa: E402  (after the checkout's path)

if __name__ == "__main__":
    sys.exit(main())
