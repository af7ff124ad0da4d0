"""``libai-ext-train`` (``tools/train_net.py``): train or evaluate a LiBai config with its ``train.trainer``.

The command line is parsed here, before OneFlow and LiBai are imported; the run itself is ``libai_ext.engine.launch``.
"""
import os
import sys

from ..config import keys as config_keys
from ..lifetime.bootstrap_wait import wait_for_rank0_bootstrap
from .common import ToolParser, epilog, require_files

DESCRIPTION = f"""\
Train (or evaluate) a LiBai LazyConfig with the trainer that train.trainer names: libai_ext's
ConsistentBatchTrainer by default, libai.engine.DefaultTrainer for LiBai's own trainer side by
side ("stock": still run through this tool, so with libai_ext's repairs of LiBai's CPU and
start-up traps and its seeding, which LiBai's own tools/train_net.py lacks).  Run it on every
rank with OneFlow's launcher (python -m oneflow.distributed.launch); on its own it trains on 1
rank.  Also writes <train.output_dir>/losses.jsonl (raw loss of every iteration) and
run_info.json (trainer, wall time, final evaluation).

config keys read by libai_ext (default when the config does not set them):
{config_keys.help_text()}
  LiBai's own keys (train.train_iter, train.dist.*, ...) keep their meaning.  Before the trainer
  is built every key under train, graph, model, dataloader and optim is checked against the keys
  the installed LiBai and libai_ext read (model, optim and the loaders against the parameters of
  their _target_): an unknown key is warned about with the closest known one, and a misspelt key
  of libai_ext's own (train.randomnes) is refused, since the run would go on under its default.
  Whatever graph class graph.train_graph names (LiBai's GraphBase included) is given the training
  step, so graph mode draws eager mode's dropout masks."""

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
    "libai-ext-train --config-file configs/demo_swin_digits_cpu.py --fast-dev-run",
    "",
    "# what libai_ext changes in OneFlow, LiBai and the process for that config, without training",
    "libai-ext-train --config-file configs/demo_swin_digits_cpu.py --list-patches",
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
    parser.add_argument("--list-patches", action="store_true",
                        help="print every change libai_ext makes to OneFlow, LiBai and this process for this config "
                             "on the installed LiBai and device (why, how to turn it off, its test), then stop "
                             "without training (default: off)")
    parser.add_argument("--fast-dev-run", action="store_true",
                        help=f"a quick trial run, as LiBai's own train_net: sets {fast} after the overrides "
                             "(default: off)")
    return parser


def parse_args(argv=None):
    """The namespace LiBai's ``default_setup`` and ``libai_ext.engine.launch`` read."""
    parser = build_parser()
    args = parser.parse_args(argv)
    require_files(parser, "--config-file", args.config_file)
    if args.fast_dev_run:
        args.opts = args.opts + fast_dev_run_overrides()
    return args


def fast_dev_run_overrides():
    return [f"{key}={value}" for key, value in FAST_DEV_RUN]


def main(argv=None):
    """The console script: 0 when the run finished; errors end the process with 1 (``exit_on_error``)."""
    args = parse_args(argv)
    # Run from a LiBai checkout, its configs import ``configs.common`` and ``projects.*``: LiBai's own
    # tools/train_net.py puts the checkout on the path, and a console script's path does not hold the directory.
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    wait_for_rank0_bootstrap()  # before OneFlow's import, which bootstraps the job
    from ..engine import launch  # OneFlow and LiBai from here on

    launch.exit_on_error(launch.print_patch_table if args.list_patches else launch.main, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
