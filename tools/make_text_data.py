#!/usr/bin/env python
"""``libai-ext-make-text-data`` from a checkout: build the text data of the NLP configs.
The tool is ``libai_ext.cli.make_text_data``; ``--help`` says how to use it.

    python tools/make_text_data.py [--out ./data/libai_text] [--libai-source ARCHIVE]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from libai_ext.cli.make_text_data import main  # noqa: E402  (after the checkout's path)

if __name__ == "__main__":
    sys.exit(main())
