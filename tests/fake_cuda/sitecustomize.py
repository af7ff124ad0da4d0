"""Test-only: make this host look like a CUDA host to every Python process started with this folder on PYTHONPATH.

Python imports ``sitecustomize`` at start-up.  This one installs an import hook that, as soon as
``oneflow.cuda`` has been imported, replaces ``oneflow.cuda.is_available`` with a function that
returns True: the one question LiBai 0.1.1 asks to choose between its CPU and CUDA code paths
(``default_setup``, ``get_layer_placement``, ``ttol``...).  Nothing else changes: OneFlow still
has no device (``oneflow.cuda.device_count()`` stays 0), so whatever needs a real GPU fails.
Each patched process prints one line to stderr, so a test can prove the patch took effect.
"""
import importlib.abc
import os
import sys

_TARGET = "oneflow.cuda"


def _pretend_available():
    return True


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)  # find the real module with the remaining finders
        try:
            import importlib.util

            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        original_exec = spec.loader.exec_module

        def exec_then_patch(module):
            original_exec(module)
            module.is_available = _pretend_available
            print(f"fake_cuda: oneflow.cuda.is_available patched to True in pid {os.getpid()}", file=sys.stderr)

        spec.loader.exec_module = exec_then_patch
        return spec


sys.meta_path.insert(0, _PatchAfterImport())
