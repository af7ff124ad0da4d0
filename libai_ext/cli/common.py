"""What every command-line tool shares: parsing with ``key=value`` overrides anywhere, help layout, ``--version``,
one-line usage errors (exit code 2), and re-launching a tool's own module on ranks.  Standard library only: a tool
parses its arguments before it imports OneFlow or LiBai.
"""
import argparse
import os
import site
import sys
import textwrap

from .. import __version__
from ..config.keys import STOCK_MEANING, STOCK_TRAINER, is_stock  # noqa: F401 (the tools' names)

OVERRIDES_DEST = "opts"
EXIT_USAGE = 2
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def is_override(word):
    """``key=value`` words: a ``=`` and no leading ``-`` (``--opt=value`` is an option)."""
    return "=" in word and not word.startswith("-")


def require_files(parser, option, paths):
    """End with a usage error naming the first of ``paths`` that is no file (exit code 2, one line):
    a missing ``--config-file`` is a bad argument, not a traceback from the config loader."""
    for path in [paths] if isinstance(paths, str) else paths:
        if not os.path.isfile(path):
            parser.error(f"{option} {path}: {'a folder, not a file' if os.path.isdir(path) else 'no such file'}")


def epilog(exit_codes=(), examples=()):
    """The text after the options in ``--help``: exit codes, then examples."""
    parts = []
    if exit_codes:
        digits = max(len(str(code)) for code, _ in exit_codes)
        parts.append("exit codes:\n" + "\n".join(
            textwrap.fill(meaning, width=96, initial_indent=f"  {code:<{digits}}  ", subsequent_indent=" " * (digits + 4))
            for code, meaning in exit_codes))
    if examples:
        parts.append("examples:\n" + "\n".join(f"  {line}" if line else "" for line in examples))
    return "\n\n".join(parts)


class ToolParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose ``key=value`` config overrides may sit before, between or after the options.

    LiBai's own parser takes everything after the first override as an override (``... train.train_iter=5
    --resume`` hands ``--resume`` to Hydra).  With ``overrides=True`` the overrides that are no option's value go,
    in order, to ``args.opts``.  A bad argument is one line on stderr and exit code 2."""

    def __init__(self, *args, overrides=False, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)
        self._takes_value = set()
        self._overrides = overrides
        self.add_argument("--version", action="version", version=f"libai_ext {__version__}")
        if overrides:
            super().add_argument(OVERRIDES_DEST, nargs="*", metavar="key=value",
                                 help="config overrides in LiBai's (Hydra's) syntax, e.g. train.train_iter=20; "
                                      "they may come before or after the options")

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def add_argument(self, *args, **kwargs):
        action = super().add_argument(*args, **kwargs)
        if action.option_strings and action.nargs != 0:
            self._takes_value.update(action.option_strings)
        return action

    def split_overrides(self, argv):
        """``(the other words, the overrides)``; an option's value is never taken as an override."""
        others, overrides, expect_value = [], [], False
        for word in argv:
            if not expect_value and is_override(word):
                overrides.append(word)
            else:
                others.append(word)
            expect_value = word in self._takes_value
        return others, overrides

    def parse_args(self, args=None, namespace=None):
        argv = sys.argv[1:] if args is None else [str(a) for a in args]
        if not self._overrides:
            return super().parse_args(argv, namespace)
        others, overrides = self.split_overrides(argv)
        parsed = super().parse_args(others, namespace)
        stray = getattr(parsed, OVERRIDES_DEST)
        if stray:
            self.error(f"unrecognized arguments: {' '.join(stray)} (config overrides are key=value)")
        setattr(parsed, OVERRIDES_DEST, overrides)
        return parsed


def require_pyplot(error, what):
    """matplotlib's pyplot (Agg), or ``error`` (an exception class) saying that ``what`` needs it and how to
    install it."""
    try:
        import matplotlib
    except ImportError:
        raise error(f"{what} needs matplotlib, which is not installed: pip install matplotlib (or install "
                    "libai_ext with its dev extra)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def relative_differences(reference, losses):
    """Per iteration, ``|loss - reference| / |reference|``."""
    return [abs(a - b) / max(abs(a), 1e-30) for a, b in zip(reference, losses)]


def compare_losses(reference, losses, rtol):
    """``(max relative difference, index of the first above rtol or None)``; a NaN counts as above."""
    diffs = relative_differences(reference, losses)
    first = next((i for i, d in enumerate(diffs) if not d <= rtol), None)
    return max(diffs), first


def module_target(module_name):
    """What ``libai_ext.testing.launch`` runs on each rank for a tool's module: ``python -m MODULE``.

    Not the file the tool was started from: a console script, ``python -m`` and ``tools/*.py`` run the same code."""
    return ("-m", module_name)


def rank_environ(environ=None):
    """``environ`` for rank processes, with this ``libai_ext`` importable as ``-m`` needs it.

    A checkout's folder goes first on ``PYTHONPATH``, so the ranks import the same ``libai_ext`` as this process; an
    installed package's site-packages folder is not added."""
    environ = dict(os.environ if environ is None else environ)
    site_dirs = set(site.getsitepackages()) | {site.getusersitepackages()}
    if PACKAGE_ROOT not in site_dirs:
        paths = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != PACKAGE_ROOT]
        environ["PYTHONPATH"] = os.pathsep.join([PACKAGE_ROOT, *paths])
    return environ


def checkout_root(required=("configs",), start=None, search_package=True):
    """The libai_ext checkout to read repository files from, or None: the first folder that holds
    every path in ``required`` of the folder the package sits in (a checkout or an editable
    install; unless ``search_package`` is False) and ``start`` (default: the working directory).
    """
    candidates = [PACKAGE_ROOT] if search_package else []
    for root in candidates + [os.path.abspath(start or os.getcwd())]:
        if all(os.path.exists(os.path.join(root, path)) for path in required):
            return root
    return None
