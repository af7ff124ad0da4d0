"""Seed python ``random``, numpy and OneFlow before the trainer is built."""
import random

import numpy as np
import oneflow as flow

_SEED_LIMIT = 2 ** 32  # numpy's legacy RandomState accepts seeds in [0, 2**32)
SEED_SCOPES = ("global",)


def check_seed(seed, key="train.seed"):
    """Refuse a seed numpy cannot take, naming the config key; returns it as an int."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"{key} must be an int in [0, 2**32), got {seed!r} ({type(seed).__name__})")
    if not 0 <= int(seed) < _SEED_LIMIT:
        raise ValueError(f"{key}={seed} is outside numpy's seed range [0, 2**32)")
    return int(seed)


def seed_everything(seed, scope="global"):
    """Seed python, numpy and OneFlow (CPU and CUDA) on this rank; returns the seed used.

    With ``scope="global"`` every rank uses ``seed`` itself, so all ranks draw the same
    numbers.  Call it on every rank, before building the model and data loaders.
    """
    seed = check_seed(seed)
    if scope not in SEED_SCOPES:
        raise ValueError(f"train.seed_scope={scope!r} is not one of {SEED_SCOPES}")
    random.seed(seed)
    np.random.seed(seed)
    flow.manual_seed(seed)
    if flow.cuda.is_available():
        flow.cuda.manual_seed_all(seed)
    return seed


def seed_from_config(cfg):
    """The config hook: seed from ``train.seed`` (and ``train.seed_scope``) before the trainer exists."""
    train = cfg.train
    seed = train.get("seed", 0)
    return seed_everything(seed, scope=train.get("seed_scope", "global"))
