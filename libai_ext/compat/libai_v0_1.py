"""LiBai 0.1.1 (pip's ``libai``): what its API looks like to the plugin.

* ``get_batch(cls, data, mixup_func=None)``; the trainers call ``get_batch(data, mixup_func)``, the evaluator
  ``get_batch(data)``.
* Stock ``get_batch`` makes each field global on its own stage's placement, so each field keeps another stage's
  local data: both halves of the bug (mixup pairing and the dp x pp sampler rank).
* No device keys: inputs live on the layout's device (cuda, or cpu where LiBai finds no CUDA).
"""
NAME = "LiBai 0.1.1"
GET_BATCH_ARGUMENTS = ("mixup_func",)
STOCK_BATCH_FROM_STAGE0 = False


def missing_config_keys(cfg):
    """Nothing to add: 0.1.1 reads no key that its own configs may lack."""
    return {}
