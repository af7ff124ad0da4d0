"""``libai-ext-check-batch`` (``tools/check_batch.py``): do the ranks that must agree on a batch agree?

Checks a config's data pipeline, layout and trainer (``train.trainer``) without training, one row per batch field
(``DESCRIPTION``, docs/tools.md).
"""
import sys

from .common import STOCK_MEANING, ToolParser, epilog, is_stock, require_files

DESCRIPTION = """\
Check that the ranks which must agree on a training batch do, for a config's data pipeline,
layout and trainer (train.trainer), without training.  N batches go through the configured
augmentation, mixup and the trainer's get_batch; every field's local tensors are gathered and
compared within each group of ranks whose data the trainer turns into one global batch.  Rank 0
prints one row per field: placement_idx, agree / disagree, the disagreeing ranks and the largest
absolute difference.  Run it on every rank with OneFlow's launcher, on the layout to check."""

EXIT_CODES = (
    (0, "every field agrees (on every rank)"),
    (1, "a field disagrees (on every rank), or an error such as a bad config value"),
    (2, "bad command-line arguments"),
)

EXAMPLES = (
    "# stock LiBai 0.1.1, a 2-stage pipeline, every rank its own random stream: stage 1's batch is",
    "# not stage 0's (exit code 1)",
    "python -m oneflow.distributed.launch --nproc_per_node 2 -m libai_ext.cli.check_batch \\",
    "    --config-file configs/demo_pipeline_cpu.py train.trainer=libai.engine.DefaultTrainer \\",
    "    train.seed_scope=rank",
    "",
    "# dp2 x pp2 with ConsistentBatchTrainer, 5 batches (from a checkout: tools/check_batch.py)",
    "python -m oneflow.distributed.launch --nproc_per_node 4 tools/check_batch.py \\",
    "    --config-file configs/demo_swin_digits_cpu.py --num-batches 5 \\",
    "    train.dist.data_parallel_size=2 train.dist.pipeline_parallel_size=2",
)


def build_parser():
    parser = ToolParser(description=DESCRIPTION, overrides=True,
                        epilog=epilog(exit_codes=EXIT_CODES, examples=EXAMPLES))
    parser.add_argument("--config-file", required=True, metavar="FILE",
                        help="the LiBai LazyConfig (.py) whose data pipeline is checked (required)")
    parser.add_argument("--num-batches", type=int, default=3, metavar="N",
                        help="how many training batches to compare (default: %(default)s)")
    return parser


def parse_args(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    require_files(parser, "--config-file", args.config_file)
    if args.num_batches < 1:
        parser.error("--num-batches must be at least 1")
    args.resume, args.eval_only = False, False  # what LiBai's default_setup reads
    return args


def compare_field(stacked, groups):
    """(disagreeing ranks, max abs difference) within the groups, for one field's gathered batches."""
    import numpy as np

    bad, worst = [], 0.0
    for ranks in groups.values():
        reference = stacked[ranks[0]].astype(np.float64)
        for rank in ranks[1:]:
            diff = float(np.abs(stacked[rank].astype(np.float64) - reference).max(initial=0.0))
            worst = max(worst, diff)
            if diff > 0:
                bad.append(rank)
    return sorted(set(bad)), worst


def check(cfg, trainer_cls, num_batches):
    from ..compat.get_batch_api import call_get_batch
    from ..engine.batch import check_fields
    from ..engine.batch_check import all_gather_local, mixed_copy, source_ranks
    from ..random.global_mixup import split_mixup
    from ..engine.trainer import ConsistentBatchTrainer

    cfg.train.stage0_only_loading = False  # every rank must load, to compare what each would contribute
    loader = trainer_cls.build_train_loader(cfg, trainer_cls.build_tokenizer(cfg))[0]
    groups = source_ranks(trainer_cls)
    report = {}
    batches = iter(loader)
    mixup_func = getattr(loader, "mixup_func", None)
    if issubclass(trainer_cls, ConsistentBatchTrainer):  # a global mixup runs after the ranks' batches meet
        mixup_func = split_mixup(mixup_func)[0]
    for _ in range(num_batches):
        data = mixed_copy(next(batches), mixup_func)
        for name, field in sorted(check_fields(data).items()):
            bad, diff = compare_field(all_gather_local(field.tensor), groups)
            row = report.setdefault(name, {"placement_idx": field.placement_idx, "bad": set(), "diff": 0.0})
            row["bad"].update(bad)
            row["diff"] = max(row["diff"], diff)
        call_get_batch(trainer_cls.get_batch, data)  # the real path runs too: it must accept these batches
    return report


def print_report(report, trainer_cls, num_batches, world_size):
    print(f"\nbatch check: {trainer_cls.__name__}, {num_batches} batches, world size {world_size}")
    if is_stock(trainer_cls):
        print(f"({STOCK_MEANING})")
    print(f"{'field':<12} {'placement_idx':>13}  {'result':<9} {'disagreeing ranks':<20} {'max abs diff':>12}")
    for name, row in report.items():
        verdict = "disagree" if row["bad"] else "agree"
        ranks = str(sorted(row["bad"])) if row["bad"] else "-"
        print(f"{name:<12} {row['placement_idx']:>13}  {verdict:<9} {ranks:<20} {row['diff']:>12.6g}")


def run(args):
    """Set up this rank as ``libai-ext-train`` does, check, report; the exit code."""
    from libai.utils import distributed as dist

    from ..engine.launch import setup

    cfg, trainer_cls = setup(args, claim_output=False)  # a check trains nothing: a live run may share the folder
    report = check(cfg, trainer_cls, args.num_batches)
    if dist.is_main_process():
        print_report(report, trainer_cls, args.num_batches, dist.get_world_size())
    failed = any(row["bad"] for row in report.values())
    print(f"rank {dist.get_rank()}: batch check {'failed' if failed else 'passed'}", flush=True)
    return 1 if failed else 0


def main(argv=None):
    args = parse_args(argv)
    from ..engine.launch import exit_on_error  # OneFlow and LiBai from here on

    return exit_on_error(run, args)


if __name__ == "__main__":
    sys.exit(main())
