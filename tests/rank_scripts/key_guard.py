"""On every rank, a training script of a user's own: LiBai's ``default_setup``, then
``ConsistentBatchTrainer(cfg)`` on a config with a misspelt LiBai key (``train.sed``: warned) and a
misspelt key of libai_ext's (``train.randomnes``: refused).

Each rank records what it logged and what it raised, waits for the others, then lets the refusal
end the script as a user's script would (uncaught): the job must end by itself.
"""
import argparse
import logging

from libai.config import LazyConfig
from libai.engine import default_setup
from libai.utils import distributed as dist

import libai_ext
from libai_ext.config.key_guard import UnknownConfigKeyError
from libai_ext.testing import write_rank_result


class Captured(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config-file", required=True)
    parser.add_argument("opts", nargs="*")
    args = parser.parse_args()
    args.resume, args.eval_only = False, False
    cfg = LazyConfig.apply_overrides(LazyConfig.load(args.config_file), args.opts)
    libai_ext.apply_patches()
    default_setup(cfg, args)
    libai_ext.seed_from_config(cfg)
    captured = Captured()
    logging.getLogger("libai_ext").addHandler(captured)
    try:
        libai_ext.ConsistentBatchTrainer(cfg)
    except UnknownConfigKeyError as e:
        write_rank_result(warnings=captured.messages, refused=str(e))
        dist.synchronize()  # every rank recorded before any ends
        raise
    write_rank_result(warnings=captured.messages, refused=None)


if __name__ == "__main__":
    main()
