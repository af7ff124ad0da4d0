#!/usr/bin/env python
"""``libai-ext-train`` from a checkout: train or evaluate a LiBai config with the trainer that
``train.trainer`` names.  The tool is ``libai_ext.cli.train_net``; ``--help`` says how to use it.

    python -m oneflow.distributed.launch --nproc_per_node 8 tools/train_net.py \\
        --config-file configs/swin_cifar100.py [--resume] [--eval-only] [--fast-dev-run] [key=value ...]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from libai_ext.cli.train_net import main  # noqa: E402  (after the checkout's path)

if __name__ == "__main__":
    sys.exit(main())
