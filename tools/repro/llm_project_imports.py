"""LiBai main installed with pip from its source lacks `libai.inference`, which every LLM project imports, and the
LLM projects' scripts seed CUDA unguarded, which aborts on a host without CUDA.

    python tools/repro/llm_project_imports.py  # one process, ~15 s, LiBai main

`libai/inference` has no `__init__.py`, so `setup.py`'s `find_packages` leaves it out of a wheel or a plain
`pip install`; LiBai's docs install with `pip install -e .`, where the source folder is imported.  Llama's and
ChatGLM's `train_net.py` call `flow.cuda.manual_seed(seed_for_rank)` with no `flow.cuda.is_available()` check.
Runs stock LiBai and OneFlow only (`libai_ext` not imported).
"""
import importlib.util
import subprocess
import sys

from _common import libai_version, verdict

missing = importlib.util.find_spec("libai.inference") is None
seed = subprocess.run([sys.executable, "-c", "import oneflow as flow; flow.cuda.manual_seed(1234); print('seeded')"],
                      capture_output=True, text=True, timeout=300)
import oneflow as flow  # noqa: E402  (after the child's run)

aborted = seed.returncode != 0 and not flow.cuda.is_available()
print(f"libai {libai_version()}: libai.inference importable: {not missing}; flow.cuda.manual_seed on this host: "
      f"exit code {seed.returncode}{' (no CUDA)' if not flow.cuda.is_available() else ''}")
verdict(missing or aborted, "an LLM project of LiBai main cannot start here: "
        + ", ".join(filter(None, ["libai.inference is not installed" if missing else "",
                                  "flow.cuda.manual_seed aborts without CUDA" if aborted else ""])))
