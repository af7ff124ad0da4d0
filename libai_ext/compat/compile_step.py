"""LiBai's start-up compile step, which fails wherever the package was installed (every host).

``default_setup``'s ``_compile_dependencies`` runs ``make`` in the installed ``libai/data/data_utils``, which neither
pip's 0.1.1 sdist nor main's archive ships a Makefile for (the helper is built at install time): local rank 0 exits and
the others hang in the next barrier. A source checkout keeps the Makefile; there the step is left alone.
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
