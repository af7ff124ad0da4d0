"""The command-line tools, installed as console scripts with the package.

=============================  ====================================  ==================================
console script                 module (``python -m ...``)            in a checkout
=============================  ====================================  ==================================
``libai-ext-train``            ``libai_ext.cli.train_net``           ``tools/train_net.py``
``libai-ext-check-batch``      ``libai_ext.cli.check_batch``         ``tools/check_batch.py``
``libai-ext-check-equivalence`` ``libai_ext.cli.check_equivalence``  ``tools/check_equivalence.py``
``libai-ext-compare-runs``     ``libai_ext.cli.compare_runs``        ``tools/compare_runs.py``
``libai-ext-gpu-check``        ``libai_ext.cli.gpu_check``           ``tools/gpu_check.py``
``libai-ext-print-run``        ``libai_ext.cli.print_run``           ``tools/print_run.py``
=============================  ====================================  ==================================

Each module parses its arguments before it imports OneFlow or LiBai (``common``), so ``--help``
and argument errors are immediate and free of OneFlow's start-up messages.
"""
