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


def rank_job_parser(description, ranks=(1, 2)):
    """The arguments of a benchmark that times a job on several rank counts: ``--ranks``, ``--out``, ``--workdir``
    (and the hidden ``--rank-job OUT`` each rank of a launch is started with)."""
    import argparse

    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, nargs="+", default=list(ranks))
    parser.add_argument("--out", default=None, help="also write the table here")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--rank-job", default=None, help=argparse.SUPPRESS)
    return parser


def measure_on_ranks(script, ranks, job_args, workdir, timeout=900):
    """Launch ``script --rank-job OUT *job_args`` on ``ranks`` CPU ranks; returns what rank 0 wrote to OUT (JSON)."""
    import json

    sys.path.insert(0, ROOT)
    from libai_ext.testing import launch

    out = os.path.join(workdir, f"ranks{ranks}.json")
    launch(os.path.abspath(script), ranks, ["--rank-job", out, *job_args], timeout=timeout,
           workdir=os.path.join(workdir, f"ranks{ranks}"))
    with open(out) as f:
        return json.load(f)
