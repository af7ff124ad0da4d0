"""``libai-ext-print-run`` (``tools/print_run.py``, the end of ``make demo``): print what a
``libai-ext-train`` run measured: trainer, wall time, final evaluation."""
import json
import os
import sys

from .common import ToolParser, epilog

DESCRIPTION = """\
Print what a libai-ext-train run measured, from <OUTPUT_DIR>/run_info.json (written when the run
finished): the trainer, the wall time of training and the final evaluation's scores."""

EXIT_CODES = ((0, "printed"), (1, "OUTPUT_DIR has no run_info.json (the run did not finish)"),
              (2, "bad arguments"))
EXAMPLES = ("# after make demo (configs/demo_pipeline_cpu.py)", "libai-ext-print-run output/demo_pipeline_cpu")
DEFAULT_OUTPUT = os.path.join("output", "demo_pipeline_cpu")


def flat_scores(results):
    """LiBai returns {metric: value} for one test set, {dataset: {metric: value}} for several."""
    scores = {}
    for key, value in results.items():
        if isinstance(value, dict):
            scores.update({f"{key}/{k}": v for k, v in value.items()})
        else:
            scores[key] = value
    return {k: round(v, 2) for k, v in scores.items()}


def build_parser():
    parser = ToolParser(description=DESCRIPTION, epilog=epilog(exit_codes=EXIT_CODES, examples=EXAMPLES))
    parser.add_argument("output_dir", nargs="?", default=DEFAULT_OUTPUT, metavar="OUTPUT_DIR",
                        help="the run's train.output_dir (default: %(default)s, the demo's)")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    path = os.path.join(args.output_dir, "run_info.json")
    if not os.path.exists(path):
        print(f"{path} does not exist: did the run finish?", file=sys.stderr)
        return 1
    with open(path) as f:
        info = json.load(f)
    print(f"{info['trainer']}: {info['wall_time_s']:.0f} s of training, "
          f"final evaluation {flat_scores(info['final_eval'])}")
    if info.get("stock"):
        print(f"({info['stock']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
