"""``libai-ext-train`` (``tools/train_net.py``): train or evaluate a LiBai config with the trainer
that ``train.trainer`` names.

The command line is parsed here, before OneFlow and LiBai are imported; the run itself is
``libai_ext.engine.launch``.
"""
import sys

from .common import ToolParser, epilog

DESCRIPTION = """\
Train (or evaluate) a LiBai LazyConfig with the trainer that train.trainer names: libai_ext's
ConsistentBatchTrainer by default, libai.engine.DefaultTrainer for stock LiBai side by side.
Run it on every rank with OneFlow's launcher (python -m oneflow.distributed.launch); on its own
it trains on 1 rank.  Also writes <train.output_dir>/losses.jsonl (raw loss of every iteration)
and run_info.json (trainer, wall time, final evaluation).

config keys read by libai_ext (default when the config does not set them):
  train.trainer               dotted path of a libai.engine.DefaultTrainer subclass;
                              "libai.engine.DefaultTrainer" runs stock LiBai
                              (default "libai_ext.ConsistentBatchTrainer")
  train.seed                  int in [0, 2**32): python, numpy and OneFlow are seeded from it
                              before the trainer is built (default 0)
  train.seed_scope            which ranks share a random stream: "global" (every rank),
                              "data_parallel" (one stream per data-parallel group) or "rank"
                              (default "global")
  train.randomness            "layout_invariant": initial weights, data order, augmentation,
                              mixup and dropout masks are the same on 1 rank and on any
                              (dp, tp, pp) layout; "fast": OneFlow's native kernels, reproducible
                              on one layout only (default "layout_invariant")
  train.batch_check           compare every field of the batch across the ranks that must agree,
                              and stop every rank with BatchMismatchError if they do not: "off",
                              "first" (the first batch) or "every" step; works with stock
                              DefaultTrainer too (default "off")
  train.stage0_only_loading   under pipeline parallelism only stage 0 reads and augments training
                              samples, with ConsistentBatchTrainer (default true)
  train.load_weight           initial weights (a checkpoint folder), loaded unless the run resumes
                              from a checkpoint (LiBai 0.1.1 reads it only under --resume)
                              (default "")
  train.preemption.enabled    on one of train.preemption.signals the ranks stop together after the
                              next step, commit its checkpoint and exit with 143 (default true)
  train.preemption.signals    the signals that preempt (default ["SIGTERM", "SIGUSR1"])
  train.preemption.grace_s    seconds from the first signal until a rank ends at the latest, saved
                              or not (124) (default 25)
  dataloader.train.mixup_func with train.randomness="layout_invariant", mixup runs once on the
                              global batch; its mode must be "batch"
  On LiBai main, train.rdma_enabled (false), train.dist.device_type and
  train.input_placement_device (the host's device kind) are filled in when a config written for
  LiBai 0.1.1 lacks them.  LiBai's own keys (train.train_iter, train.dist.*, graph.enabled, ...)
  keep their meaning; with ConsistentBatchTrainer a train.dist.pipeline_num_layers that disagrees
  with the model's layers is warned about (a stage left without layers) or refused (layers past
  it)."""

# What --fast-dev-run sets, applied after the command line's overrides (LiBai main's train_net
# sets the same keys): a short run that trains, logs, evaluates twice and ends.
FAST_DEV_RUN = (("train.train_epoch", 0), ("train.train_iter", 20), ("train.evaluation.eval_period", 10),
                ("train.log_period", 1))

EXIT_CODES = (
    (0, "training (or --eval-only evaluation) finished"),
    (1, "an error on this rank: a bad config value (the message names the key), a failed run; "
        "each rank ends at once, none is left waiting for the others"),
    (2, "bad command-line arguments"),
    (124, "preempted, but the checkpoint could not be committed within train.preemption.grace_s: resume "
          "continues from the last committed one"),
    (130, "a second SIGTERM, or SIGINT, ended the preemption's save: resume continues from the last "
          "committed checkpoint"),
    (143, "preempted (SIGTERM, SIGUSR1): the checkpoint of the step reached is committed, resume continues "
          "there (OneFlow's launcher itself exits with 1 when signalled)"),
)

EXAMPLES = (
    "# 1 rank, 20 iterations with two evaluations: does the config run at all?",
    "libai-ext-train --config-file configs/swin_digits_cpu.py --fast-dev-run",
    "",
    "# 2 CPU ranks, a 2-stage pipeline (from a checkout: tools/train_net.py is the same tool)",
    "python -m oneflow.distributed.launch --nproc_per_node 2 tools/train_net.py \\",
    "    --config-file configs/demo_pipeline_cpu.py",
    "",
    "# 8 GPUs, (dp, tp, pp) = (2, 2, 2): -m runs the installed module on every rank",
    "python -m oneflow.distributed.launch --nproc_per_node 8 -m libai_ext.cli.train_net \\",
    "    --config-file configs/swin_cifar100.py train.output_dir=output/swin_cifar100",
    "",
    "# resume that run (options may come after the overrides), or run stock LiBai instead",
    "python -m oneflow.distributed.launch --nproc_per_node 8 -m libai_ext.cli.train_net \\",
    "    --config-file configs/swin_cifar100.py train.output_dir=output/swin_cifar100 --resume",
    "python -m oneflow.distributed.launch --nproc_per_node 8 -m libai_ext.cli.train_net \\",
    "    --config-file configs/swin_cifar100.py train.trainer=libai.engine.DefaultTrainer",
    "",
    "# several nodes: the same command on each, with its --node_rank",
    "python -m oneflow.distributed.launch --nproc_per_node 8 --nnodes 2 --node_rank 0 \\",
    "    --master_addr <address of node 0> --master_port 12345 -m libai_ext.cli.train_net \\",
    "    --config-file configs/swin_cifar100.py",
)


def build_parser():
    fast = ", ".join(f"{key}={value}" for key, value in FAST_DEV_RUN)
    parser = ToolParser(description=DESCRIPTION, overrides=True,
                        epilog=epilog(exit_codes=EXIT_CODES, examples=EXAMPLES))
    parser.add_argument("--config-file", required=True, metavar="FILE",
                        help="the LiBai LazyConfig (.py) to run (required)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from <train.output_dir>/last_checkpoint: weights, optimizer, "
                             "iteration and every rank's random state (default: off)")
    parser.add_argument("--eval-only", action="store_true",
                        help="evaluate the model of the last checkpoint (--resume) or of train.load_weight, "
                             "then stop (default: off)")
    parser.add_argument("--fast-dev-run", action="store_true",
                        help=f"a quick trial run, as LiBai's own train_net: sets {fast} after the overrides "
                             "(default: off)")
    return parser


def parse_args(argv=None):
    """The namespace LiBai's ``default_setup`` and ``libai_ext.engine.launch`` read."""
    args = build_parser().parse_args(argv)
    if args.fast_dev_run:
        args.opts = args.opts + fast_dev_run_overrides()
    return args


def fast_dev_run_overrides():
    return [f"{key}={value}" for key, value in FAST_DEV_RUN]


def main(argv=None):
    """The console script: 0 when the run finished; errors end the process with 1 (``exit_on_error``)."""
    args = parse_args(argv)
    from ..engine import launch  # OneFlow and LiBai from here on

    launch.exit_on_error(launch.main, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
