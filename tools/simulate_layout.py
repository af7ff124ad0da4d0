#!/usr/bin/env python
"""``libai-ext-print-run`` from a checkout: print what a train_net run measured (``make demo`` ends
with it).  The tool is ``libai_ext.cli.simulate_layout``; ``--help`` says how to use it."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from libai_ext.cli.simulate_layout import main  # noqa: E402  (after the checkout's path)

if __name__ == "__main__":
    sys.exit(main())
