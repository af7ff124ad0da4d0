"""On every rank: draw from python, numpy and OneFlow after seed_everything (or without it)."""
import random

import numpy as np
import oneflow as flow

from common import layout_parser, run_or_die, setup_layout
from libai_ext import seed_everything
from libai_ext.engine import placement_data_parallel_rank
from libai_ext.testing import write_rank_result


def draws():
    return {
        "python": [random.random() for _ in range(3)],
        "numpy": np.random.rand(3).tolist(),
        "oneflow": flow.rand(3).numpy().tolist(),
    }


def main():
    parser = layout_parser()
    parser.add_argument("--seed", default=None)
    parser.add_argument("--scope", default="global")
    args = parser.parse_args()
    setup_layout(args)
    if args.seed is not None:
        seed = int(args.seed) if args.seed.lstrip("-").isdigit() else args.seed
        write_rank_result(seed_used=seed_everything(seed, scope=args.scope),
                          dp_group=placement_data_parallel_rank())
    write_rank_result(**draws())


if __name__ == "__main__":
    run_or_die(main)
