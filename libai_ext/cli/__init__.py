"""The tools and their diagnostics: the command-line tools, installed as console scripts with the package
(pyproject.toml).

One module per tool; ``tools/<module>.py`` is a thin wrapper of each for a checkout:

* ``libai-ext-train`` (``train_net``): train or evaluate a LiBai config with ``train.trainer``;
* ``libai-ext-check-batch`` (``check_batch``): do the ranks that must agree on a batch agree?
* ``libai-ext-check-equivalence`` (``check_equivalence``): does the parallel layout change training?
* ``libai-ext-compare-runs`` (``compare_runs``): loss and top-1 curves of runs, and a table;
* ``libai-ext-gpu-check`` (``gpu_check``): libai_ext's CUDA paths on this machine's GPUs;
* ``libai-ext-print-run`` (``print_run``): what a finished run measured;
* ``libai-ext-simulate-layout`` (``simulate_layout``): every rank's batch and draws at a layout too large to launch;
* ``libai-ext-make-text-data`` (``make_text_data``): real text for LiBai's GPT-2 and BERT, built offline.

Each module parses its arguments before it imports OneFlow or LiBai (``common``), so ``--help``
and argument errors are immediate and free of OneFlow's start-up messages.  Multi-rank runs start
the module on every rank: ``python -m oneflow.distributed.launch --nproc_per_node N -m
libai_ext.cli.train_net ...``.  May import every folder of libai_ext; no runtime folder imports it.
"""
