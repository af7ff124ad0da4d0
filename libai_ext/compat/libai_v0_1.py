"""LiBai 0.1.1 (pip's ``libai``): the line the plugin was first written for.

* ``get_batch(cls, data, mixup_func=None)``; the trainers call ``get_batch(data, mixup_func)``,
  the evaluator ``get_batch(data)``.
* Stock ``get_batch`` makes each field global directly on its own stage's placement, so each
  field keeps the local data of a different stage: both halves of the bug (mixup pairing
  and the dp x pp sampler rank).
* The config has no device keys: inputs live on the layout's device (cuda, or cpu where
  LiBai finds no CUDA).
"""
NAME = "LiBai 0.1.1"
GET_BATCH_ARGUMENTS = ("mixup_func",)
STOCK_BATCH_FROM_STAGE0 = False


def missing_config_keys(cfg):
    """Nothing to add: 0.1.1 reads no key that its own configs may lack."""
    return {}
