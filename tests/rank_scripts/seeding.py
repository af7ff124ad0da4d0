"""On every rank: draw from python, numpy and OneFlow before seeding (``--unseeded-first``), then after
seed_everything under each of ``--scopes`` in turn (one launch holds every scope: each call reseeds every stream)."""
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
    parser.add_argument("--scopes", default="global", help="comma-separated seed scopes, seeded in turn")
    parser.add_argument("--unseeded-first", action="store_true", help="draw once before any seeding")
    args = parser.parse_args()
    setup_layout(args)
    if args.unseeded_first:
        write_rank_result(scope=None, **draws())
    if args.seed is not None:
        seed = int(args.seed) if args.seed.lstrip("-").isdigit() else args.seed
        for scope in args.scopes.split(","):
            write_rank_result(scope=scope, seed_used=seed_everything(seed, scope=scope),
                              dp_group=placement_data_parallel_rank(), **draws())


if __name__ == "__main__":
    run_or_die(main)
