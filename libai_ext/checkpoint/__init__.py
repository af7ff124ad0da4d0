"""Checkpoint and resume: atomic saves (``committed``), the folder's files, manifest and ``last_checkpoint``
(``files``), which checkpoint to resume under which layout (``resume``), each rank's generator states (``rng_state``).

May import ``lifetime`` (collectives, fault points), ``random``, ``compat`` and ``config``. Nothing is imported here:
``import libai_ext.checkpoint.files`` loads no OneFlow.
"""
