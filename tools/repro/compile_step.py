"""LiBai's set-up compiles a dataset helper with `make` in the *installed* package, which has no Makefile.

    python tools/repro/compile_step.py          # one process, no launcher, ~5 s

`libai.engine.default_setup` calls `_compile_dependencies()`, which runs
`make -C site-packages/libai/data/data_utils`.  pip's sdist (0.1.1) and a pip install of
main from source ship no Makefile there (the helper extension is already built), so
`make` fails and rank 0 calls sys.exit(1); in a multi-rank job the other ranks then wait
in `dist.synchronize()` forever.  Host-independent: CUDA hosts hit it too.
"""
import os

import libai.data.data_utils as data_utils
from libai.engine import default

from _common import libai_version, verdict

folder = os.path.dirname(data_utils.__file__)
print(f"libai {libai_version()}: Makefile in {folder}: {os.path.exists(os.path.join(folder, 'Makefile'))}")
try:
    default._compile_dependencies()
    verdict(False, "the compile step ran through")
except SystemExit as e:
    verdict(True, f"_compile_dependencies() called sys.exit({e.code}) (make found no Makefile)")
