"""The run behind ``libai-ext-train`` (``tools/train_net.py``): LiBai's train_net with a configurable
trainer class.  Its command line is ``libai_ext.cli.train_net``.

``train.trainer`` names the trainer (a class or a dotted path; default ``libai_ext.ConsistentBatchTrainer``);
``libai.engine.DefaultTrainer`` reproduces stock LiBai for side-by-side comparison.
"""
import importlib
import json
import logging
import os
import sys
import time
import traceback

import oneflow as flow
from libai.config import LazyConfig, try_get_key
from libai.engine import DefaultTrainer, default_setup
from libai.utils import distributed as dist
from libai.utils.checkpoint import Checkpointer
from libai.utils.logger import setup_logger

from ..compat import apply_patches, fill_missing_config_keys, libai_line, patching
from ..config.key_guard import guard_config_keys
from ..config.keys import STOCK_MEANING, is_stock
from ..lifetime.launcher import DISABLE_ENV, is_oneflow_launcher
from ..lifetime.preemption import Preempted, preemption_settings
from ..lifetime.startup import start_rank
from ..random import DEFAULT_RANDOMNESS, check_randomness
from ..random.seeding import check_scope, check_seed, seed_from_config
from .batch_check import BATCH_CHECK_MODES, install_batch_check
from .graph import check_graph_config
from .hooks import RawLossWriter

DEFAULT_TRAINER = "libai_ext.ConsistentBatchTrainer"
SETUP_DONE = "LiBai set-up done (default_setup)"
logger = logging.getLogger("libai_ext")


def resolve_trainer(spec):
    """``train.trainer`` -> a ``DefaultTrainer`` subclass, or a clear error naming the key."""
    spec = spec or DEFAULT_TRAINER
    if isinstance(spec, str):
        module_name, _, class_name = spec.rpartition(".")
        try:
            spec = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError, ValueError) as e:
            raise ValueError(f"train.trainer={spec!r} cannot be imported ({e}); "
                             f"use a dotted path such as {DEFAULT_TRAINER!r}") from None
    if not (isinstance(spec, type) and issubclass(spec, DefaultTrainer)):
        raise TypeError(f"train.trainer={spec!r} is not a subclass of libai.engine.DefaultTrainer")
    return spec


def load_config(args):
    cfg = LazyConfig.load(args.config_file)
    return LazyConfig.apply_overrides(cfg, args.opts)


def check_config(cfg):
    """Everything that can be refused before any rank talks to another (so none hangs)."""
    guard_config_keys(cfg)  # a misspelt key first: the checks below would read its default
    trainer_cls = resolve_trainer(try_get_key(cfg, "train.trainer"))
    check_seed(try_get_key(cfg, "train.seed", default=0))
    check_scope(try_get_key(cfg, "train.seed_scope", default="global"))
    check_randomness(try_get_key(cfg, "train.randomness", default=DEFAULT_RANDOMNESS))
    batch_check = try_get_key(cfg, "train.batch_check", default="off")
    if batch_check not in BATCH_CHECK_MODES:
        raise ValueError(f"train.batch_check={batch_check!r} is not one of {BATCH_CHECK_MODES}")
    if try_get_key(cfg, "graph.enabled", default=False):
        check_graph_config(cfg, layout_set_up=False)
    preemption_settings(cfg)
    return trainer_cls


def evaluate_only(cfg, args, trainer_cls):
    model = trainer_cls.build_model(cfg)
    Checkpointer(model, save_dir=cfg.train.output_dir).resume_or_load(cfg.train.load_weight, resume=args.resume)
    test_loaders = trainer_cls.build_test_loader(cfg, trainer_cls.build_tokenizer(cfg))
    return trainer_cls.test(cfg, test_loaders, model)


def write_run_info(cfg, trainer_cls, wall_time_s, results):
    if not dist.is_main_process():
        return
    info = {"trainer": f"{trainer_cls.__module__}.{trainer_cls.__qualname__}",
            "wall_time_s": round(wall_time_s, 2), "final_eval": results or {}}
    if is_stock(trainer_cls):
        info["stock"] = STOCK_MEANING
    with open(os.path.join(cfg.train.output_dir, "run_info.json"), "w") as f:
        json.dump(info, f, indent=2, default=float)


def setup(args, claim_output=True):
    """Load and check the config, then set up every rank: patches, LiBai's setup, logging, seeds (``claim_output``:
    refuse a second live run into the output folder)."""
    cfg = load_config(args)
    trainer_cls = check_config(cfg)
    # before default_setup, which reads train.dist.device_type on main and writes config.yaml and logs
    tied_to_launcher = start_rank(cfg, claim_output=claim_output)
    apply_patches()
    default_setup(cfg, args)
    setup_logger(cfg.train.output_dir, distributed_rank=dist.get_rank(), name="libai_ext")
    # In every rank's log (log.txt, log.txt.rank<r>): proof that LiBai's start-up passed here.
    logger.info(f"{SETUP_DONE} on rank {dist.get_rank()}")
    if tied_to_launcher:
        logger.info(f"rank {dist.get_rank()} ends with its launcher (prctl PR_SET_PDEATHSIG)")
    if is_stock(trainer_cls) and dist.is_main_process():
        logger.info(STOCK_MEANING)
    seed_from_config(cfg)
    return cfg, trainer_cls


def build_trainer(cfg, trainer_cls):
    """The configured trainer with this project's hooks (raw losses, batch check) installed."""
    trainer = trainer_cls(cfg)
    if not any(isinstance(hook, RawLossWriter) for hook in trainer._hooks):  # a stock trainer's run
        trainer.register_hooks([RawLossWriter(cfg.train.output_dir)])
    install_batch_check(trainer, try_get_key(cfg, "train.batch_check", default="off"))
    return trainer


def train(cfg, trainer_cls, trainer):
    """Train, record run_info.json, log and return the final evaluation."""
    start = time.perf_counter()
    trainer.train()
    results = getattr(trainer, "_last_eval_results", None)
    write_run_info(cfg, trainer_cls, time.perf_counter() - start, results)
    if results and dist.is_main_process():
        logger.info(f"final evaluation ({trainer_cls.__name__}): {dict(results)}")
    return results


def main(args):
    cfg, trainer_cls = setup(args, claim_output=not args.eval_only)
    if args.eval_only:
        return evaluate_only(cfg, args, trainer_cls)
    trainer = build_trainer(cfg, trainer_cls)
    if dist.is_main_process():
        logger.info(patching.summary())
    return train(cfg, trainer_cls, trainer)


def planned_patches(args):
    """The patches a run of ``args``'s config makes on this LiBai line and device, without training: the
    repairs as ``apply_patches()`` makes them (then undone), and what the trainer adds as it runs."""
    cfg = load_config(args)
    trainer_cls = check_config(cfg)
    with patching.restoring():
        fill_missing_config_keys(cfg)
        apply_patches()
        rows = patching.applied_patches()
    later = []
    if is_oneflow_launcher(os.getppid()) and os.environ.get(DISABLE_ENV, "1") != "0":
        later.append("die_with_launcher")
    if not is_stock(trainer_cls):
        randomness = try_get_key(cfg, "train.randomness", default=DEFAULT_RANDOMNESS)
        later += ["init_recording"] if randomness == "layout_invariant" else []
        later += ["sampler_placement_rank", "random_op_routing", "first_forward_check"]
        if try_get_key(cfg, "graph.enabled", default=False):
            later.append("step_fed_graph")
            if try_get_key(cfg, "train.dist.device_type", default="cpu") == "cpu":
                later.append("graph_shared_params")
        if preemption_settings(cfg)[0]:
            later += ["preemption_signals", "fork_hook"]
    return rows, [patching.DECLARED[key] for key in later]


def print_patch_table(args):
    """``libai-ext-train --list-patches``: the table, on stdout."""
    rows, later = planned_patches(args)
    by_patch = {}
    for row in rows:
        by_patch.setdefault(row["patch"], dict(row, targets=[]))["targets"].append(row["target"])
    print(f"libai_ext patches for {args.config_file} on {libai_line().NAME}, "
          f"{flow.env.get_world_size()} rank(s) here")
    print("\nmade at start-up (libai_ext.apply_patches):")
    print(patching.table_text([dict(row, target=", ".join(row["targets"])) for row in by_patch.values()]) or "  none")
    print("\nmade by the trainer as it runs:")
    print(patching.table_text(later) or "  none")
    return 0


def exit_on_error(fn, *args):
    """Run ``fn``; on an error, print it and end this process at once (code 1); on a preemption, let
    ``Preempted`` end it with its code through OneFlow's own exit (``libai_ext.lifetime.preemption``).

    After a Python error OneFlow 0.9.0 can block the exit waiting on its peers (seen with all 8 ranks refusing one
    config), hence the immediate end. A preemption needs OneFlow's exit: it keeps rank 0, host of the control server,
    alive until every rank's last barrier is answered; otherwise a rank waiting on it aborts in OneFlow's RPC client
    without a log line. The grace period still bounds the exit.
    """
    try:
        return fn(*args)
    except Preempted:
        logging.shutdown()
        raise
    except Exception:
        traceback.print_exc()
        end_now(1)


def end_now(code):
    """Flush the logs and end this process with ``code``, without OneFlow's teardown."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
