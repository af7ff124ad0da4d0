"""OneFlow 0.9.0's `nn.Dropout` draws from a generator with a fixed seed: `flow.manual_seed` has no effect.

    .venv/bin/python tools/repro/dropout_fixed_seed.py   # ~5 s

Every `nn.Dropout` module builds its own generator, seeded with one constant whatever the program
seeded: two modules built after `flow.manual_seed(1)` and `flow.manual_seed(2)` draw the same first
mask, and so do two modules of one model (LiBai's attention, MLP and embedding dropouts).  Under
data or tensor parallelism every rank therefore draws the same local pattern, and `train.seed`
changes nothing.  The functional `flow.nn.functional.dropout` does follow `flow.manual_seed`.
"""
import numpy as np
import oneflow as flow

from _common import verdict

x = flow.ones(64, 64)


def module_mask(seed):
    flow.manual_seed(seed)
    return flow.nn.Dropout(0.5)(x).numpy() != 0


def functional_mask(seed):
    flow.manual_seed(seed)
    return flow.nn.functional.dropout(x, 0.5, training=True).numpy() != 0


modules_ignore_seed = np.array_equal(module_mask(1), module_mask(2))
functional_follows_seed = not np.array_equal(functional_mask(1), functional_mask(2))
flow.manual_seed(3)
first, second = flow.nn.Dropout(0.5), flow.nn.Dropout(0.5)
siblings_equal = np.array_equal(first(x).numpy() != 0, second(x).numpy() != 0)
seed_attribute = getattr(getattr(first, "generator", None), "initial_seed", lambda: "?")()
print(f"nn.Dropout after manual_seed(1) vs (2): same mask {modules_ignore_seed}; two modules of one program: "
      f"same mask {siblings_equal}; the module's generator seed: {seed_attribute}; "
      f"F.dropout follows manual_seed: {functional_follows_seed}")
verdict(modules_ignore_seed and siblings_equal, "nn.Dropout ignores flow.manual_seed (fixed generator seed)")
