"""Checkpoint and resume: a save commits atomically on every rank or not at all (``committed``), the folder's
files, manifest and ``last_checkpoint`` (``files``), which checkpoint a run resumes and under which layout
(``resume``), and each rank's generator states saved beside the weights (``rng_state``).

May import ``lifetime`` (collectives, fault points), ``random`` (the generator states), ``compat`` and ``config``.
Nothing is imported here: ``import libai_ext.checkpoint.files`` loads no OneFlow.
"""
