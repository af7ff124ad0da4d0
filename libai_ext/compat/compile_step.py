"""LiBai's start-up compile step, which fails wherever the package was installed (every host).

``default_setup`` calls ``_compile_dependencies``, which runs ``make`` in the installed
``libai/data/data_utils``.  Neither pip's 0.1.1 sdist nor an install of main's archive ships
that Makefile (the helper extension is built at install time instead), so local rank 0
exits and the other ranks hang in the barrier that follows.  Only a source checkout keeps
the Makefile; there the step works and is left alone.
"""
import logging

from . import detect
from .patching import replace

logger = logging.getLogger(__name__)


def skip_compile_dependencies():
    logger.info("libai_ext: skipping LiBai's dataset helper compile step (no Makefile in the installed "
                "package; the helper was built at install time)")


def apply(compile_step_can_run=None):
    """Skip the step if it cannot run; returns whether it was (or already had been) replaced."""
    import libai.engine.default as default_module

    if compile_step_can_run is None:
        compile_step_can_run = detect.compile_step_can_run()
    if compile_step_can_run:
        return False
    replace(default_module, "_compile_dependencies", skip_compile_dependencies,
            "no Makefile in the installed libai/data/data_utils", patch="compile_step")
    return True
