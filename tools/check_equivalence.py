#!/usr/bin/env python
"""``libai-ext-check-equivalence`` from a checkout: does the parallel layout change the training?
The tool is ``libai_ext.cli.check_equivalence``; ``--help`` says how to use it.

    python tools/check_equivalence.py --config-file configs/demo_pipeline_cpu.py \\
        --layouts 1 pp2 tp2 dp2xpp2 --iters 5 [--plot layouts.png] [key=value ...]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from libai_ext.cli.check_equivalence import main  # noqa: E402  (after the checkout's path)

if __name__ == "__main__":
    sys.exit(main())
