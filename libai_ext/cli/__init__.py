"""The command-line tools: one module per tool, installed as a ``libai-ext-*`` console script, with
``tools/<module>.py`` a thin wrapper of each for a checkout (docs/install.md#console-scripts, docs/tools.md).

Each module parses its arguments before it imports OneFlow or LiBai (``common``), so ``--help`` and argument errors
are immediate and free of OneFlow's start-up messages.  Multi-rank runs start the module on every rank:
``python -m oneflow.distributed.launch --nproc_per_node N -m libai_ext.cli.train_net ...``.

May import every folder of libai_ext; no runtime folder imports it.
"""
