"""Every random draw of a ``libai_ext`` run, owned in one place.

* ``keys``: ``key(seed, what, counters...)``, the one function every draw's key comes from;
* ``modes``: ``train.randomness`` (``"layout_invariant"`` or ``"fast"``) and the layers' seed;
* ``seeding``: python, numpy and OneFlow seeded per ``train.seed_scope`` before the trainer exists;
* ``counter_rng``: layout-invariant bits, a hash of (seed, stream, counter, global position);
* ``keyed_op``: the keyed-dropout op (a OneFlow user op built at install) that graphs run: mask and apply in a pass;
* ``shard_rng``: OneFlow generators seeded per shard (the "fast" mode);
* ``devices``: the one CUDA device a rank seeds, saves and restores (its own);
* ``rng_state``: each rank's generator states, captured and restored (``checkpoint.rng_state`` saves them);
* ``init_recipes`` / ``init_derivations`` / ``param_init``: initial weights from the seed and names
  alone (copies and exact derivations follow their source);
* ``late_parameters``: parameters that appear after ``build_model`` (never trained) refused or warned about;
* ``sample_keys``: the data order per (seed, epoch) and each sample's augmentation streams;
* ``index_shuffle``: the keyed permutation behind that order, computed per position;
* ``owned_generators`` / ``stream_probe``: generators a dataset owns and global streams a
  ``collate_fn`` draws from, found so that the loader can key or refuse them;
* ``oneflow_random_ops``: OneFlow's random ops, found in its own registries by
  ``tools/dev/random_op_inventory.py``; ``oneflow_draws`` wraps them under every name, ``forward_draws`` draws their values inside a
  model's forward by global position, ``audit`` names the ones no key covers (``draws``: which
  step and call a draw is).

May import ``compat`` (the LiBai layout and the patch registry) and nothing else of libai_ext.
"""
from .index_shuffle import IndexShuffle
from .init_recipes import InitRecorder, recording_init
from .late_parameters import watch_late_parameters
from .modes import DEFAULT_RANDOMNESS, RANDOMNESS_MODES, check_randomness, layer_seed, randomness, set_layer_seed
from .param_init import build_with_seeded_init, reinitialize
from .rng_state import (
    capture_rng_state, cuda_device_count, preserved_rng_state, restore_rng_state,
)
from .sample_keys import epoch_order, keyed_streams, preserved_streams, sample_seeds, seed_streams
from .seeding import SEED_SCOPES, check_seed, scoped_seed, seed_everything, seed_from_config

__all__ = ["DEFAULT_RANDOMNESS", "RANDOMNESS_MODES", "SEED_SCOPES", "IndexShuffle", "InitRecorder",
           "build_with_seeded_init", "capture_rng_state", "check_randomness", "check_seed",
           "cuda_device_count", "epoch_order", "keyed_streams", "layer_seed", "preserved_rng_state",
           "preserved_streams", "randomness", "recording_init", "reinitialize", "restore_rng_state", "sample_seeds",
           "scoped_seed", "seed_everything", "seed_from_config", "seed_streams", "set_layer_seed",
           "watch_late_parameters"]
