"""Check that the ranks which must agree on a batch do, for a config's data pipeline and layout.

    python -m oneflow.distributed.launch --nproc_per_node 4 tools/check_batch.py \
        --config-file configs/demo_pipeline_cpu.py --num-batches 3 [key=value ...]

Builds the configured data pipeline on the configured layout with the configured trainer
(``train.trainer``), runs N batches through augmentation, mixup and the trainer's
``get_batch``, and prints one row per field: placement_idx, agree / disagree, which
ranks disagree, and the largest absolute difference.  Exit code 0 when every field
agrees, 1 otherwise (on every rank).
"""
import argparse
import sys

import numpy as np
from libai.engine import default_setup
from libai.utils import distributed as dist

from libai_ext.compat import apply_patches, fill_missing_config_keys
from libai_ext.compat.get_batch_api import call_get_batch
from libai_ext.engine.batch import check_fields
from libai_ext.engine.batch_check import all_gather_local, mixed_copy, source_ranks
from libai_ext.engine.global_mixup import split_mixup
from libai_ext.engine.trainer import ConsistentBatchTrainer
from libai_ext.engine.launch import check_config, exit_on_error, load_config
from libai_ext.random import seed_from_config


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config-file", required=True)
    parser.add_argument("--num-batches", type=int, default=3)
    parser.add_argument("opts", nargs=argparse.REMAINDER, help="key=value config overrides")
    args = parser.parse_args(argv)
    args.resume, args.eval_only = False, False  # what LiBai's default_setup reads
    return args


def compare_field(stacked, groups):
    """(disagreeing ranks, max abs difference) within the groups, for one field's gathered batches."""
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


def print_report(report, trainer_cls, num_batches):
    print(f"\nbatch check: {trainer_cls.__name__}, {num_batches} batches, world size {dist.get_world_size()}")
    print(f"{'field':<12} {'placement_idx':>13}  {'result':<9} {'disagreeing ranks':<20} {'max abs diff':>12}")
    for name, row in report.items():
        verdict = "disagree" if row["bad"] else "agree"
        print(f"{name:<12} {row['placement_idx']:>13}  {verdict:<9} {str(sorted(row['bad'])) if row['bad'] else '-':<20}"
              f" {row['diff']:>12.6g}")


def main(argv=None):
    args = parse_args(argv)
    cfg = load_config(args)
    trainer_cls = check_config(cfg)
    fill_missing_config_keys(cfg)
    apply_patches()
    default_setup(cfg, args)
    seed_from_config(cfg)
    report = check(cfg, trainer_cls, args.num_batches)
    if dist.is_main_process():
        print_report(report, trainer_cls, args.num_batches)
    failed = any(row["bad"] for row in report.values())
    print(f"rank {dist.get_rank()}: batch check {'failed' if failed else 'passed'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(exit_on_error(main))
