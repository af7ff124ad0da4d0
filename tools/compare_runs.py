#!/usr/bin/env python
"""``libai-ext-compare-runs`` from a checkout: loss and top-1 curves of LiBai runs in one PNG, plus a
markdown table.  The tool is ``libai_ext.cli.compare_runs``; ``--help`` says how to use it.

    python tools/compare_runs.py --runs base=output/a fixed=output/b --out docs/experiment --title "..."
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from libai_ext.cli.compare_runs import main  # noqa: E402  (after the checkout's path)

if __name__ == "__main__":
    sys.exit(main())
