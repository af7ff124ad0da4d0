"""What every benchmark does with its markdown report: print it, and write it to ``--out`` if given.

A report written to a file starts with what ``benchmarks/make_benchmarks_page.py`` shows of it in docs/benchmarks.md:

    # <title>

    Command: `<the command that wrote the file>`
    Host: <the machine: its name, its cores and its load average when the measurement ended>
"""
import os
import platform
import shlex
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def command_line(argv=None):
    """The command this process runs, as typed from the repository's root."""
    argv = sys.argv if argv is None else argv
    python = os.path.relpath(sys.executable, ROOT)
    script = os.path.relpath(os.path.abspath(argv[0]), ROOT)
    return " ".join([python if not python.startswith("..") else "python", script, *map(shlex.quote, argv[1:])])


def host():
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{platform.node()}, {os.cpu_count()} CPU cores, load average {load} at the end"


def header(title, command=None):
    """The metadata a results file starts with (see the module's docstring)."""
    return f"# {title}\n\nCommand: `{command or command_line()}`\nHost: {host()}\n\n"


def publish(text, out=None, *, title, command=None):
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(header(title, command) + text)
