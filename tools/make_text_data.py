"""Build the text data of configs/libai_gpt2_cpu.py and configs/libai_bert_cpu.py ahead of a run.

    python tools/make_text_data.py [--out ./data/libai_text] [--libai-source LIBAI_SOURCE]

Real English prose that ships with scikit-learn and CPython, tokenizer files trained on it (a
byte-level BPE in GPT-2's format, a WordPiece vocabulary) and the mmap indexed datasets that
LiBai's own ``tools/preprocess_data.py`` makes of it; no download.  ``--libai-source`` is a LiBai
source folder or archive holding that tool (default: $LIBAI_MAIN_ARCHIVE, else LiBai main's
archive beside this repository).  A folder already built is left as it is (about half a minute
the first time).  Prints what the folder holds (its MANIFEST.json).
"""
import argparse
import json
import logging

from libai_ext.data.text_data import DEFAULT_ROOT, ensure_text_data, read_manifest


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=DEFAULT_ROOT, help=f"the folder to build (default {DEFAULT_ROOT})")
    parser.add_argument("--libai-source", default=None, help="a LiBai source folder or .tar.gz archive")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ensure_text_data(args.out, libai_source=args.libai_source)
    print(json.dumps(read_manifest(args.out), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
