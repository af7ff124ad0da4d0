"""Seed python ``random``, numpy and OneFlow before the trainer is built.

``SEED_SCOPES`` say which ranks share a stream (docs/randomness.md): ``"global"`` every rank (``seed`` itself),
``"data_parallel"`` one data-parallel group (it reads the same samples: all its stages and tensor-parallel peers),
``"rank"`` none. Whatever the scope, the stochastic layers of ``libai_ext.random.layers`` key on ``seed`` itself, in
the mode ``randomness`` (``train.randomness``) picks: their masks are SBP-correct by construction, not by seeding.
"""
import random

import numpy as np
import oneflow as flow

from ..compat.layout import placement_data_parallel_rank
from .devices import seed_own_cuda_device
from .draws import key
from .modes import DEFAULT_RANDOMNESS, check_randomness, set_layer_seed

_SEED_LIMIT = 2 ** 32  # numpy's legacy RandomState accepts seeds in [0, 2**32)
SEED_SCOPES = ("global", "data_parallel", "rank")


def check_seed(seed, key="train.seed"):
    """Refuse a seed numpy cannot take, naming the config key; returns it as an int."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"{key} must be an int in [0, 2**32), got {seed!r} ({type(seed).__name__})")
    if not 0 <= int(seed) < _SEED_LIMIT:
        raise ValueError(f"{key}={seed} is outside numpy's seed range [0, 2**32)")
    return int(seed)


def check_scope(scope, key="train.seed_scope"):
    if scope not in SEED_SCOPES:
        raise ValueError(f"{key}={scope!r} is not one of {SEED_SCOPES}")
    return scope


def scoped_seed(seed, scope):
    """The seed this rank uses under ``scope`` (needs LiBai's dist util for "data_parallel")."""
    if scope == "global":
        return seed
    if scope == "data_parallel":
        group = placement_data_parallel_rank()
    else:
        group = flow.env.get_rank()
    return key(int(seed), "scope", scope, int(group), bits=32)  # numpy's legacy RandomState takes 32 bits


def seed_everything(seed, scope="global", randomness=DEFAULT_RANDOMNESS):
    """Seed python, numpy and OneFlow (CPU and this rank's CUDA device) and set the stochastic
    layers' seed and mode; returns the seed used here.

    Call it on every rank, before building the model and data loaders.
    """
    seed = check_seed(seed)
    check_randomness(randomness)
    local_seed = scoped_seed(seed, check_scope(scope))
    random.seed(local_seed)
    np.random.seed(local_seed)
    flow.manual_seed(local_seed)
    # This rank's GPU only (flow.cuda.manual_seed_all would open every GPU of the host from every rank).
    seed_own_cuda_device(local_seed)
    set_layer_seed(seed, randomness)
    return local_seed


def seed_from_config(cfg):
    """The config hook: seed from ``train.seed`` / ``train.seed_scope`` / ``train.randomness``
    before the trainer exists."""
    train = cfg.train
    return seed_everything(train.get("seed", 0), scope=train.get("seed_scope", "global"),
                           randomness=train.get("randomness", DEFAULT_RANDOMNESS))
