"""``libai-ext-make-text-data`` (``tools/make_text_data.py``): build the text data of the NLP configs ahead
of a run (the configs build it on first use too)."""
import json
import logging
import sys

from .common import ToolParser, epilog

DEFAULT_ROOT = "./data/libai_text"  # text_data.DEFAULT_ROOT; text_data is imported after parsing (no OneFlow in --help)

DESCRIPTION = """\
Build the data of configs/libai_gpt2_cpu.py and configs/libai_bert_cpu.py: real English prose that
ships with scikit-learn and CPython, tokenizer files trained on it (a byte-level BPE in GPT-2's
format, a WordPiece vocabulary) and the mmap indexed datasets LiBai's own tools/preprocess_data.py
makes of it; nothing is downloaded.  A folder already built is left as it is (about half a minute
the first time); one that holds something else is refused.  Prints the folder's MANIFEST.json."""

EXIT_CODES = ((0, "built (or already there)"), (1, "the data cannot be built (the message names why)"),
              (2, "bad arguments"))
EXAMPLES = ("# where configs/libai_gpt2_cpu.py and configs/libai_bert_cpu.py look by default (text_data.root)",
            "libai-ext-make-text-data",
            "", "# LiBai's preprocess tool from a LiBai source archive or folder",
            "libai-ext-make-text-data --out data/libai_text --libai-source libai-main.tar.gz")


def build_parser():
    parser = ToolParser(description=DESCRIPTION, epilog=epilog(exit_codes=EXIT_CODES, examples=EXAMPLES))
    parser.add_argument("--out", default=DEFAULT_ROOT, metavar="DIR",
                        help="the folder to build (default: %(default)s)")
    parser.add_argument("--libai-source", default=None, metavar="SOURCE",
                        help="a LiBai source folder or .tar.gz archive holding tools/preprocess_data.py (default: "
                             "$LIBAI_MAIN_ARCHIVE, else the Makefile's LiBai main archive)")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    from ..data import text_data

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        text_data.ensure_text_data(args.out, libai_source=args.libai_source)
    except text_data.TextDataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps(text_data.read_manifest(args.out), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
