#!/usr/bin/env python
"""``libai-ext-check-batch`` from a checkout: do the ranks that must agree on a batch agree?
The tool is ``libai_ext.cli.check_batch``; ``--help`` says how to use it.

    python -m oneflow.distributed.launch --nproc_per_node 4 tools/check_batch.py \\
        --config-file configs/demo_pipeline_cpu.py --num-batches 3 [key=value ...]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from libai_ext.cli.check_batch import main  # noqa: E402  (after the checkout's path)

if __name__ == "__main__":
    sys.exit(main())
