"""What a reader of README.md and docs/*.md follows: links, tool commands, make targets, paths.

* every relative link resolves to a file of the repository, and an ``#anchor`` into a markdown file
  names one of its headings (GitHub's heading ids); every docs page is reachable from README.md;
* every command a code block (or inline code) shows parses:
  - each tool it runs answers ``--help`` (``tools/<x>.py``, ``libai-ext-<x>`` and
    ``python -m libai_ext.cli.<x>`` through the module, ``benchmarks/<x>.py``), once per tool;
  - the arguments a code block gives a ``libai_ext.cli`` tool parse with that tool's own parser
    (its layouts too); other scripts' ``--options`` are options of their ``--help``;
  - every ``make <target>`` is a target of the Makefile; every shell script shown passes ``bash -n``;
* every source file or folder of the repository shown (under ``configs/``, ``tools/``, ``benchmarks/``,
  ``tests/``, ``libai_ext/``) exists, and docs/testing.md's long-tier table names exactly the test files
  with a ``long`` marker;
* docs/index.md links every other page, and docs/benchmarks.md is what ``benchmarks/make_benchmarks_page.py``
  makes of ``benchmarks/results/`` (every results file carrying its title, command and host);
* no page tells the project's history or process: no work session, "on the way", internal targets, dates
  (CHANGELOG.md is the place for history, and is not checked);
* the README: under 200 lines, its sections in the order a LiBai user needs them, install, the one-line
  change, the launch through libai_ext's train_net, the three lines of a script of one's own, what "stock" means,
  what is refused and the patch table's link in its first 60 lines, the limits before line 120, none of the
  project's jargon, each figure it quotes in exactly one docs page, its cost ratios the measurement page's
  computed ranges and its ``make test`` time the times table's;
* one home per fact: the generated tables (config keys, gpu_check's rows, the test times) are what
  ``benchmarks/make_docs_tables.py`` makes of their sources; no page states gpu_check's time limit, rows or a
  default of a tool or config key other than the code's; no table appears on two pages; every libai_ext version
  named exists; a command for an installed package reads no file of a checkout; the words after a table name
  only columns it has.

Quick: no OneFlow start-up except ``tools/make_text_data.py --help`` (that script imports it).
"""
import contextlib
import importlib
import importlib.util
import io
import os
import re
import shlex
import subprocess
import sys
import unicodedata
import urllib.parse

import pytest

from conftest import ROOT

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.M)
FENCE = re.compile(r"^([ \t]*)(```|~~~)[ \t]*([\w+-]*)[^\n]*\n.*?^\1\2[ \t]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`([^`\n]+)`")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.I)
SHELL_BLOCKS = ("", "sh", "bash", "shell", "console", "text")
SHELL_OPERATORS = {"|", "||", "&&", ";", "&", ">", ">>", "2>&1", "<"}
# Repository paths a page may show; outputs (benchmarks/results/, docs/) are checked as links instead.
REPO_PATH = re.compile(r"(?<![\w/.~-])((?:configs|tools|benchmarks|tests|libai_ext|\.ci)/[\w./{},*<>-]*)")
GENERATED = ("benchmarks/results/",)
SOURCE_SUFFIXES = (".py", ".sh", ".c", "/")
SOURCE_FILES = {".ci/run"}
# Paths of LiBai's own source tree that the docs name as LiBai's.
LIBAI_PATHS = {"tools/preprocess_data.py", "configs/moco_pretrain.py"}  # LiBai's (main and its projects)
LONG_MARKER = re.compile(r"pytest\.mark\.long\b")
PLACEHOLDER = "{}"  # what <...> in a command becomes: no tool or path name matches it


def doc_files(root=ROOT):
    docs = os.path.join(root, "docs")
    pages = sorted(os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md")) if os.path.isdir(docs) else []
    return [os.path.join(root, "README.md")] + pages


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def relative(path, root=ROOT):
    return os.path.relpath(path, root)


# --- markdown -----------------------------------------------------------------------------------

def code_blocks(text):
    """``[(language, body)]`` of the fenced blocks."""
    return [(m.group(3).lower(), m.group(0).split("\n", 1)[1].rsplit("\n", 1)[0]) for m in FENCE.finditer(text)]


def prose(text):
    """``text`` without fenced blocks and inline code (links inside code are no links)."""
    return INLINE_CODE.sub("code", FENCE.sub("", text))


def inline_code(text):
    return INLINE_CODE.findall(FENCE.sub("", text))


def slug(heading):
    """GitHub's id of a heading: its rendered text, lower case, punctuation dropped, spaces as '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images: their text
    text = text.replace("`", "").replace("*", "").strip().lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LNM")
    return kept.replace(" ", "-")


def anchors(path):
    """Every id a link may name in the markdown file ``path`` (repeated headings get -1, -2...)."""
    text = FENCE.sub("", read(path))
    found, seen = set(HTML_ANCHOR.findall(text)), {}
    for heading in HEADING.findall(text):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(text):
    return LINK.findall(prose(text)) + REFERENCE_LINK.findall(prose(text))


def is_external(target):
    return re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) is not None


def resolve(page, target, root=ROOT):
    """``(file, anchor)`` a relative link of ``page`` names (``file`` absolute)."""
    path, _, anchor = target.partition("#")
    path = urllib.parse.unquote(path)
    if not path:
        return page, anchor
    base = root if path.startswith("/") else os.path.dirname(page)
    return os.path.normpath(os.path.join(base, path.lstrip("/"))), anchor


def broken_links(root=ROOT):
    """``["page: target (why)"]`` for every relative link that does not resolve."""
    problems = []
    for page in doc_files(root):
        for target in links(read(page)):
            if is_external(target):
                continue
            path, anchor = resolve(page, target, root)
            where = f"{relative(page, root)}: {target}"
            if os.path.commonpath([os.path.abspath(root), path]) != os.path.abspath(root):
                problems.append(f"{where} (outside the repository)")
            elif not os.path.exists(path):
                problems.append(f"{where} (no such file)")
            elif anchor and path.endswith(".md") and anchor not in anchors(path):
                problems.append(f"{where} (no heading with id {anchor!r} in {relative(path, root)})")
    return problems


def reachable_pages(root=ROOT):
    """The markdown files reachable from README.md through relative links."""
    seen, todo = set(), [os.path.join(root, "README.md")]
    while todo:
        page = todo.pop()
        if page in seen or not os.path.isfile(page):
            continue
        seen.add(page)
        for target in links(read(page)):
            if not is_external(target):
                path, _ = resolve(page, target, root)
                if path.endswith(".md"):
                    todo.append(path)
    return seen


# --- commands -----------------------------------------------------------------------------------

def command_lines(text):
    """``[(line, from_block)]``: shell lines of fenced blocks (continuations joined) and inline code."""
    lines = []
    for language, body in code_blocks(text):
        if language in SHELL_BLOCKS:
            lines += [(line, True) for line in body.replace("\\\n", " ").splitlines() if line.strip()]
    return lines + [(span, False) for span in inline_code(text)]


def words(line):
    """Shell words of ``line`` up to a comment or an operator, placeholders (``<...>``, ``[...]``) opened."""
    line = re.sub(r"<[^<>]*>", PLACEHOLDER, line)
    out = []
    for word in shlex.split(line, comments=True):
        if word in SHELL_OPERATORS or word.startswith((">", "2>")):
            break
        if word.startswith("["):
            word = word[1:].removesuffix("]")
        elif word.endswith("]") and "[" not in word:
            word = word[:-1]
        if word:
            out.append(word)
    return out


def console_scripts():
    """``{libai-ext-<x>: libai_ext.cli module}`` from pyproject.toml."""
    text = read(os.path.join(ROOT, "pyproject.toml"))  # (no tomllib on Python 3.10)
    section = text.split("[project.scripts]", 1)[1].split("\n[", 1)[0]
    return dict(re.findall(r'^([\w-]+)\s*=\s*"([\w.]+):\w+"', section, re.M))


def tool_call(tokens, scripts):
    """``(tool, arguments)`` of the first tool of this repository in ``tokens``, else None.

    ``tool``: ``("module", "libai_ext.cli.x")``, ``("script", "tools/x.py")`` or ``("shell", "tools/x.sh")``.
    """
    for i, word in enumerate(tokens):
        if word == "-m" and i + 1 < len(tokens) and re.fullmatch(r"libai_ext\.cli\.\w+", tokens[i + 1]):
            return ("module", tokens[i + 1]), tokens[i + 2:]
        if word in scripts:
            return ("module", scripts[word]), tokens[i + 1:]
        if re.fullmatch(r"libai-ext-[a-z][\w-]*", word):
            return ("module", f"unknown console script {word}"), tokens[i + 1:]
        match = re.search(r"(?:^|/)((?:tools|benchmarks)/[\w-]+\.(py|sh))$", word)
        if match and match.group(1) not in LIBAI_PATHS:
            return ("shell" if match.group(2) == "sh" else "script", match.group(1)), tokens[i + 1:]
    return None


def make_targets_shown(tokens):
    """The targets of every ``make`` in ``tokens`` (options and ``VAR=value`` skipped)."""
    targets = []
    for i, word in enumerate(tokens):
        if word != "make":
            continue
        rest = iter(tokens[i + 1:])
        for arg in rest:
            if arg in ("-C", "-f", "-j"):
                next(rest, None)
            elif not arg.startswith("-") and "=" not in arg:
                targets.append(arg)
    return targets


def makefile_targets():
    text = read(os.path.join(ROOT, "Makefile"))
    targets = set()
    for names in re.findall(r"^([A-Za-z0-9_.-][A-Za-z0-9_. -]*?)\s*:(?!=)", text, re.M):
        targets.update(names.split())
    return targets


def repository_paths(text):
    """Source files and folders of the repository ``text`` shows; patterns (``configs/libai_{gpt2,bert}_cpu.py``),
    outputs and files of a run's folders (a checkpoint's ``libai_ext/manifest.json``) are not checked."""
    found = set()
    for match in REPO_PATH.finditer(re.sub(r"https?://\S+", "", text)):
        path = match.group(1).split("::")[0].rstrip(".,;:")
        if re.search(r"[{}*<>]", path) or path.startswith(GENERATED) or path in LIBAI_PATHS:
            continue
        if path.endswith(SOURCE_SUFFIXES) or path in SOURCE_FILES:
            found.add(path)
    return found


@pytest.fixture(scope="module")
def shown():
    """Everything the pages show: ``{"calls": [(page, tool, args, from_block)], "make": [(page, target)],
    "paths": [(page, path)]}``."""
    scripts = console_scripts()
    calls, make, paths = [], [], []
    for page in doc_files():
        text, name = read(page), relative(page)
        paths += [(name, path) for path in sorted(repository_paths(text))]
        for line, from_block in command_lines(text):
            runs_tool = re.search(r"tools/|benchmarks/|libai-ext-|libai_ext\.cli\.", line)
            if not runs_tool and not re.search(r"\bmake\b", line):
                continue
            try:
                tokens = words(line)
            except ValueError as e:  # unbalanced quotes
                if runs_tool:
                    calls.append((name, ("unparsable", line), [str(e)], from_block))
                continue
            make += [(name, target) for target in make_targets_shown(tokens)]
            call = tool_call(tokens, scripts)
            if call is not None:
                calls.append((name, *call, from_block))
    return {"calls": calls, "make": make, "paths": paths}


def start_help(kind, target):
    command = ["-m", target, "--help"] if kind == "module" else [os.path.join(ROOT, target), "--help"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=ROOT)


def finished(process, timeout=120):
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.fixture(scope="module")
def helps(shown):
    """``{(kind, target): completed --help}``, one run per distinct tool shown; a ``tools/<x>.py`` that wraps
    ``libai_ext.cli.<x>`` also runs as its module."""
    tools = {(kind, target) for _, (kind, target), _, _ in shown["calls"] if kind in ("module", "script")}
    for kind, target in list(tools):
        module = cli_module_of(kind, target)
        if module:
            tools.add(("module", module))
    started = {tool: start_help(*tool) for tool in sorted(tools)}  # side by side: mostly Python start-up
    return {tool: finished(process) for tool, process in started.items()}


def cli_module_of(kind, target):
    """The ``libai_ext.cli`` module behind a tool, or None (a script of its own)."""
    if kind == "module":
        return target
    name = os.path.splitext(os.path.basename(target))[0]
    if target.startswith("tools/") and os.path.isfile(os.path.join(ROOT, "libai_ext", "cli", f"{name}.py")):
        return f"libai_ext.cli.{name}"
    return None


def parse_with_tool(module_name, args):
    """The error message of ``args`` under the tool's own parser, or None when they parse."""
    module = importlib.import_module(module_name)
    parser = module.build_parser()
    args = [word for i, word in enumerate(args)
            if word != "..." or _takes_value(parser, args[i - 1] if i else "")]
    args = [PLACEHOLDER if word == "..." else word for word in args]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parsed = parser.parse_args(args)
    except SystemExit:
        return err.getvalue().strip().splitlines()[-1]
    for layout in getattr(parsed, "layouts", None) or []:
        try:
            module.parse_layout(layout)
        except ValueError as e:
            return f"layout {layout!r}: {e}"
    return None


def _takes_value(parser, word):
    action = parser._option_string_actions.get(word.split("=")[0])
    return action is not None and action.nargs != 0


def help_options(text):
    return set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", text))


# --- the tests ----------------------------------------------------------------------------------

def test_every_relative_link_resolves():
    assert doc_files()[1:], "no docs/*.md found"
    assert broken_links() == []


def test_a_broken_link_or_anchor_fails_the_check(tmp_path):
    """The check itself, on a copy with one link of each kind broken (and the good ones kept)."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# Top\n\n[ok](docs/page.md) [ok anchor](docs/page.md#a-section-x)\n"
                                        "[gone](docs/missing.md) [bad anchor](docs/page.md#no-such-heading)\n"
                                        "`[in code](docs/not-a-link.md)` [web](https://example.com/x.md)\n")
    (tmp_path / "docs" / "page.md").write_text("## A section: `x`\n\n[back](../README.md#top) [self](#a-section-x)"
                                               "\n[escape](../../elsewhere.md)\n")
    assert broken_links(str(tmp_path)) == [
        "README.md: docs/missing.md (no such file)",
        "README.md: docs/page.md#no-such-heading (no heading with id 'no-such-heading' in docs/page.md)",
        "docs/page.md: ../../elsewhere.md (outside the repository)",
    ]


def test_a_bad_command_fails_the_checks():
    """The command checks themselves, on commands with one mistake each."""
    line = 'python -m oneflow.distributed.launch --nproc_per_node 2 -m libai_ext.cli.train_net --config-file <cfg> x=1'
    tool, args = tool_call(words(line), console_scripts())
    assert (tool, args) == (("module", "libai_ext.cli.train_net"), ["--config-file", PLACEHOLDER, "x=1"])
    assert parse_with_tool("libai_ext.cli.train_net", args) is None
    assert "unrecognized arguments: --bogus" in parse_with_tool("libai_ext.cli.train_net", args + ["--bogus"])
    assert "--config-file" in parse_with_tool("libai_ext.cli.train_net", ["--resume"])
    layouts = ["--config-file", "configs/demo_pipeline_cpu.py", "--layouts", "1", "dp2xacc2:graph"]
    assert parse_with_tool("libai_ext.cli.check_equivalence", layouts) is None
    assert "layout 'pp2x'" in parse_with_tool("libai_ext.cli.check_equivalence", layouts + ["pp2x"])
    assert make_targets_shown(words('make -C . test-all PYTEST_ARGS="-x -q" # comment')) == ["test-all"]
    assert "tset" not in makefile_targets()
    assert repository_paths("`configs/nope.py`, configs/libai_{a,b}_cpu.py, tests/test_x.py::test_y., "
                            "`libai_ext/manifest.json`") == {"configs/nope.py", "tests/test_x.py"}


def test_headings_get_githubs_ids():
    assert slug("One trajectory, any layout: `train.randomness=\"layout_invariant\"`") == \
        "one-trajectory-any-layout-trainrandomnesslayout_invariant"
    assert slug("LiBai 0.1.1 and LiBai main") == "libai-011-and-libai-main"
    assert slug("13. In-place buffer updates are lost inside `nn.Graph`") == \
        "13-in-place-buffer-updates-are-lost-inside-nngraph"


def test_every_docs_page_is_reachable_from_the_readme():
    unreachable = [relative(p) for p in doc_files()[1:] if p not in reachable_pages()]
    assert unreachable == [], "not linked from README.md, directly or through other pages"


def test_every_tool_shown_answers_help(shown, helps):
    assert helps, "no tool command found in the docs"
    unknown = sorted({f"{page}: {target}" for page, (kind, target), _, _ in shown["calls"]
                      if kind == "unparsable" or target.startswith("unknown")})
    assert unknown == []
    failed = {f"{kind} {target}": (run.returncode, run.stderr[-500:]) for (kind, target), run in helps.items()
              if run.returncode != 0 or "usage:" not in run.stdout}
    assert failed == {}


def test_every_shell_script_shown_parses(shown):
    scripts = sorted({target for _, (kind, target), _, _ in shown["calls"] if kind == "shell"})
    assert scripts, "no shell script found in the docs"
    for script in scripts:
        result = subprocess.run(["bash", "-n", os.path.join(ROOT, script)], capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, f"{script}: {result.stderr}"


def test_every_command_shown_parses(shown, helps, monkeypatch):
    """Code blocks: full commands, parsed by the tool's own parser. Inline code: fragments, so only their
    options are checked against the tool's."""
    monkeypatch.chdir(ROOT)
    problems, parsed = [], 0
    for page, (kind, target), args, from_block in shown["calls"]:
        module = cli_module_of(kind, target) if kind in ("module", "script") else None
        if module and from_block:
            error = parse_with_tool(module, args)
            parsed += 1
        elif kind in ("module", "script"):
            known = help_options(helps[("module", module) if module else (kind, target)].stdout)
            unknown = sorted({a.split("=")[0] for a in args if a.startswith("-")} - known)
            error = f"options not in its --help: {unknown}" if unknown else None
        else:
            continue
        if error:
            problems.append(f"{page}: {target} {' '.join(args)}\n    {error}")
    assert parsed > 0, "no full tool command found in the docs' code blocks"
    assert problems == [], "\n".join(problems)


def test_every_make_target_shown_exists(shown):
    targets = makefile_targets()
    assert {"setup", "demo", "test"} <= targets, f"Makefile targets not found: {sorted(targets)}"
    assert shown["make"], "no make command found in the docs"
    missing = sorted({f"{page}: make {target}" for page, target in shown["make"] if target not in targets})
    assert missing == []


def test_every_repository_path_shown_exists(shown):
    assert any(path.startswith("configs/") for _, path in shown["paths"])
    missing = sorted({f"{page}: {path}" for page, path in shown["paths"]
                      if not os.path.exists(os.path.join(ROOT, path))})
    assert missing == []


def test_the_long_tier_table_names_the_files_with_a_long_marker():
    tests = os.path.join(ROOT, "tests")
    marked = {f"tests/{name}" for name in os.listdir(tests) if name.startswith("test_") and name.endswith(".py")
              and name != os.path.basename(__file__) and LONG_MARKER.search(read(os.path.join(tests, name)))}
    text = read(os.path.join(ROOT, "docs", "testing.md"))
    section = text.split("## What the long tier holds", 1)[1].split("\n## ", 1)[0]
    rows = "\n".join(line for line in section.splitlines() if line.startswith("|"))
    assert marked, "no test file holds a long marker"
    assert set(re.findall(r"tests/test_\w+\.py", rows)) == marked


# --- structure: the index, the generated measurements page --------------------------------------

def test_the_index_links_every_page_and_the_readme_links_the_index():
    index = os.path.join(ROOT, "docs", "index.md")
    linked = {resolve(index, target)[0] for target in links(read(index)) if not is_external(target)}
    missing = [relative(p) for p in doc_files()[1:] if p != index and p not in linked]
    assert missing == [], "docs pages docs/index.md does not link"
    readme = os.path.join(ROOT, "README.md")
    assert index in {resolve(readme, t)[0] for t in links(read(readme)) if not is_external(t)}


def make_benchmarks_page():
    spec = importlib.util.spec_from_file_location("make_benchmarks_page",
                                                  os.path.join(ROOT, "benchmarks", "make_benchmarks_page.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_measurements_page_is_generated_from_the_results():
    page = make_benchmarks_page()
    assert read(os.path.join(ROOT, "docs", "benchmarks.md")) == page.render(), \
        "docs/benchmarks.md is out of date: run .venv/bin/python benchmarks/make_benchmarks_page.py"


def test_a_results_file_without_its_metadata_is_named(tmp_path):
    page = make_benchmarks_page()
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    (results / "good.md").write_text("# A title\n\nCommand: `.venv/bin/python benchmarks/x.py --out y`\n"
                                     "Host: vm, 2 CPU cores, load average 1.0, 2.0, 3.0 at the end; "
                                     "2031-01-02 03:04 UTC\n\n## Inner\ntext\n| a |\n|---|\n")
    text = page.render(str(tmp_path))
    assert "### A title" in text and "#### Inner" in text and "\n| a |" in text
    assert "text\n" not in text, "a results file's prose stays in the file"
    assert "Host: Load average 1.0, 2.0, 3.0 at the end." in text and "2031" not in text
    assert "## Other measurements" in text  # a file no group names still gets its section
    for bad, field in [("Command: `x`\nHost: h\n", "first line"), ("# T\n\nHost: h\n", "Command"),
                       ("# T\n\nCommand: `x`\n", "Host")]:
        (results / "bad.md").write_text(bad)
        with pytest.raises(page.ResultsFileError, match=rf"bad\.md: .*{field}"):
            page.render(str(tmp_path))


# --- history and process words ------------------------------------------------------------------

HISTORY = [
    ("a work session", re.compile(r"\bsessions?\b", re.I)),
    ("'on the way'", re.compile(r"\bon the way\b", re.I)),
    # "stop" as a step of the work ("at this stop", "stop 3"), not the verb ("stop every rank", "all stop")
    ("'stop' as a step of the work",
     re.compile(r"\b(?:this|that|each|every|last|next|previous|per)\s+stop\b|\bstop\s+\d+\b", re.I)),
    ("an internal target", re.compile(r"\b\d+(?:\.\d+)?\s*x\s+targets?\b|\b(?:above|below|under|over|meets?|met|"
                                      r"miss(?:es|ed)?|beats?|reach(?:es|ed)?)\s+(?:the|its|our|a|an)\s+"
                                      r"(?:\d+(?:\.\d+)?\s*x\s+)?targets?\b", re.I)),
    ("a date", re.compile(r"\b(?:19|20)\d\d-[01]\d-[0-3]\d\b")),
]
DATED_HEADING = re.compile(r"\b(?:19|20)\d\d-[01]\d\b|\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*"
                           r"\.?\s+(?:\d{1,2},?\s+)?(?:19|20)\d\d\b", re.I)


def history_words(text):
    """``["line N: what (the words)"]`` for every history or process word in ``text``'s prose (code is not
    prose: a log line may say "Stop.")."""
    found = []
    body = prose(text)
    for number, line in enumerate(body.splitlines(), 1):
        for what, pattern in HISTORY:
            found += [f"line {number}: {what} ({m.group(0)!r})" for m in pattern.finditer(line)]
        if HEADING.match(line) and DATED_HEADING.search(line):
            found.append(f"line {number}: a dated heading ({line.strip()!r})")
    return found


def problems_on_every_page(check):
    """``{page: what check(page's text) found}`` for the pages where it found something."""
    found = {relative(page): check(read(page)) for page in doc_files()}
    return {page: problems for page, problems in found.items() if problems}


def test_no_page_tells_the_projects_history():
    """README.md and docs/*.md describe the software as it is; history goes to CHANGELOG.md."""
    assert problems_on_every_page(history_words) == {}


def test_the_history_check_finds_history_and_passes_plain_text():
    history = ["Measured in this session.", "## Measurements on the way", "At this stop we measured it.",
               "See stop 12.", "1.24x the fast path, above the 1.10x target.", "The medians meet the targets.",
               "Measured 2026-12-01 on 2 cores.", "## 2026-12-02 (later): rotated order", "### Results, March 2026"]
    assert all(history_words(text) for text in history), [t for t in history if not history_words(t)]
    plain = ["A bad batch stops every rank.", "Stop that run, or give this one another folder.",
             "The ranks agree whether to stop; all stop after the same step.", "Every `make` target exists.",
             "The label is the correct target of the loss.", "`make: *** No targets specified.  Stop.`",
             "## 16. `train.load_weight` is ignored", "A vocabulary of 2048 symbols, 1,500 iterations.",
             "```\nsession = 1  # code is not prose\n```"]
    assert [t for t in plain if history_words(t)] == []


# --- the README ---------------------------------------------------------------------------------

README_MAX_LINES = 199
# What a reader new to the project must find, and the last line it may start on.
README_LANDMARKS = {
    "the install section": (re.compile(r"^## Install\b", re.M), 60),
    "the one-line change": (re.compile(r'^train\.trainer = "libai_ext\.ConsistentBatchTrainer"', re.M), 60),
    "the launch": (re.compile(r"^python -m oneflow\.distributed\.launch --nproc_per_node \d+ .*-m libai_ext\.cli\.train_net",
                              re.M), 60),
    "the three lines of a script of one's own": (re.compile(r"^libai_ext\.seed_from_config\(cfg\)", re.M), 60),
    "what stock means": (re.compile(r"\*\*\"Stock\"\*\* in these pages is LiBai's `DefaultTrainer`", re.M), 60),
    "what is refused": (re.compile(r"\*\*Refused\*\*", re.M), 60),
    "the patch table": (re.compile(r"docs/architecture\.md#every-change-to-oneflow-libai-and-the-process"), 60),
    "the limits": (re.compile(r"^## Limits\b", re.M), 119),
}
# The README's sections, in the order a LiBai user needs them (words each heading holds).
README_SECTIONS = ["fixes", "Install", "one line", "test", "guarantees", "Limits"]
README_JARGON = re.compile(r"\bthis project\b|\bquick tier\b|\bfault matrix\b|\bS\(0\)|\bC loop\b|\bSM count\b|"
                           r"\bpart(?:s|ing)? (?:at|from)\b|\brefused by name\b|\bseeded per shard\b|"
                           r"\bcounter-based permutation\b|\bthe shard the first stage holds\b", re.I)
# A figure: a decimal number (6.4e-7, 1.035, 10.4); versions and addresses (0.1.1, 10.0.0.1) and the versions
# named after a package or a licence (Python 3.10, Apache-2.0) are not figures.
FIGURE = re.compile(r"(?<![\w.])(\d+\.\d+(?:e-?\d+)?)(?![\w.]*\d)")
VERSION_OF = re.compile(r"(?:Python|OneFlow|LiBai|numpy|pip)\s*[<>=]*\s*$|Apache-$", re.I)


def line_of(pattern, text):
    match = pattern.search(text)
    return text.count("\n", 0, match.start()) + 1 if match else None


def readme_problems(text):
    """What keeps ``text`` from being the README a LiBai user needs: length, landmarks, section order, jargon."""
    problems = []
    if text.count("\n") > README_MAX_LINES:
        problems.append(f"{text.count(chr(10))} lines, more than {README_MAX_LINES}")
    for what, (pattern, last) in README_LANDMARKS.items():
        line = line_of(pattern, text)
        if line is None or line > last:
            problems.append(f"{what} at line {line}, not by line {last}")
    headings = re.findall(r"^## (.*)$", FENCE.sub("", text), re.M)
    where = [next((i for i, h in enumerate(headings) if words in h), None) for words in README_SECTIONS]
    if None in where or where != sorted(where):
        problems.append(f"sections out of order or missing: {list(zip(README_SECTIONS, where))}")
    problems += [f"jargon: {word!r}" for word in README_JARGON.findall(prose(text))]
    return problems


def test_the_readme_gives_a_libai_user_what_they_need_first():
    assert readme_problems(read(os.path.join(ROOT, "README.md"))) == []


def test_the_readme_check_finds_a_late_launch_a_missing_section_and_jargon():
    text = read(os.path.join(ROOT, "README.md"))
    late = text.replace("## What it fixes\n", "## What it fixes\n" + "\n" * 30, 1)
    assert [p for p in readme_problems(late) if p.startswith(("the launch", "the one-line change"))] != []
    assert any("out of order" in p for p in readme_problems(text.replace("## Limits", "## Caveats")))
    assert readme_problems(text + "\nMeasured on this project's quick tier.\n")[-2:] == \
        ["jargon: 'this project'", "jargon: 'quick tier'"]


def readme_figures():
    text = prose(read(os.path.join(ROOT, "README.md")))
    return sorted({m.group(1) for m in FIGURE.finditer(text) if not VERSION_OF.search(text[:m.start()][-12:])})


def test_every_figure_of_the_readme_lives_in_exactly_one_docs_page():
    figures = readme_figures()
    assert figures, "no figure found in README.md"
    pages = {relative(p): prose(read(p)) for p in doc_files()[1:]}
    homes = {f: sorted(name for name, text in pages.items()
                       if re.search(rf"(?<![\w.]){re.escape(f)}(?![\w.]*\d)", text)) for f in figures}
    assert {f: where for f, where in homes.items() if len(where) != 1} == {}


# --- one home per fact: the code's constants, the generated tables, the measurements page ---------

def make_docs_tables():
    spec = importlib.util.spec_from_file_location("make_docs_tables", os.path.join(ROOT, "benchmarks",
                                                                     "make_docs_tables.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_tables_are_up_to_date():
    """docs/config-keys.md, tools.md's gpu_check rows and testing.md's times are what their sources make."""
    stale = [page for page, (current, new) in make_docs_tables().rendered_pages().items() if current != new]
    assert stale == [], "out of date: run python benchmarks/make_docs_tables.py"


def gpu_check_module():
    return importlib.import_module("libai_ext.cli.gpu_check")


MINUTES = re.compile(r"(\d+(?:\.\d+)?)\s*(?:-|to\s+)?\s*(?:\d+\s*)?min(?:ute)?s?\b")
GPU_CHECK = re.compile(r"gpu[-_]check")


def paragraphs(text):
    return [p for p in re.split(r"\n\s*\n", text) if p.strip()]


def gpu_check_problems(pages, budget_s, row_names):
    """``["page: what"]`` where ``pages`` ({name: text}) state gpu_check's time other than its budget, list rows
    other than its own outside the generated block, or say it leaves out a row it has (graph mode)."""
    problems = []
    budget = f"{budget_s / 60:g}"
    generated = re.compile(r"<!-- generated by benchmarks/make_docs_tables.py: gpu-check -->.*?<!-- end of generated block: "
                           r"gpu-check -->", re.S)
    for name, text in pages.items():
        outside = generated.sub("", text)
        for paragraph in paragraphs(outside):
            if not GPU_CHECK.search(paragraph):
                continue
            for minutes in MINUTES.findall(paragraph):
                if minutes != budget:
                    problems.append(f"{name}: gpu-check said to take {minutes} minutes; its budget is {budget}")
            if any("graph" in row for row in row_names) and re.search(
                    r"graph[^.]*(?:does not|doesn't|not) cover|not cover[^.]*graph|graph[^.]*untested", paragraph,
                    re.I):
                problems.append(f"{name}: says gpu-check leaves out graph mode; its rows include "
                                f"{[r for r in row_names if 'graph' in r]}")
        for table in tables(outside):
            first = [row[0].strip("` ") for row in table["rows"]]
            if len(first) >= 2 and set(first) <= set(row_names):
                problems.append(f"{name}: a table of gpu-check rows {first} outside the generated block")
    return problems


def test_every_page_states_gpu_checks_budget_and_rows_as_the_tool_does():
    module = gpu_check_module()
    pages = {relative(p): read(p) for p in doc_files()}
    pages["Makefile"] = read(os.path.join(ROOT, "Makefile"))
    pages["gpu_check --help"] = module.build_parser().format_help()
    names = [name for name, _, _ in module.CHECKS]
    assert [name for name, _, _ in module.planned_checks(8)] == names, "CHECKS and the plan disagree"
    assert gpu_check_problems(pages, module.TOTAL_BUDGET_S, names) == []


def tables(text):
    """``[{"header": [...], "rows": [[...]], "text": normalised rows}]`` of the markdown tables outside code."""
    found, lines = [], FENCE.sub("", text).splitlines()
    i = 0
    while i < len(lines) - 1:
        if lines[i].startswith("|") and re.fullmatch(r"\|[-:| ]+\|", lines[i + 1].strip()):
            header = [c.strip() for c in lines[i].strip().strip("|").split("|")]
            rows, i = [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append([c.strip() for c in lines[i].strip().strip("|").split("|")])
                i += 1
            found.append({"header": header, "rows": rows})
        else:
            i += 1
    return found


def duplicated_tables(pages):
    """``["page a and page b: header"]`` for two tables with one header and at least half their rows equal."""
    seen, problems = [], []
    for name, text in pages.items():
        for table in tables(text):
            rows = {tuple(r) for r in table["rows"]}
            for other, other_table in seen:
                if other_table["header"] != table["header"] or other == name:
                    continue
                shared = rows & {tuple(r) for r in other_table["rows"]}
                if rows and len(shared) * 2 >= min(len(rows), len(other_table["rows"])):
                    problems.append(f"{other} and {name}: {' | '.join(table['header'])}")
            seen.append((name, table))
    return problems


def test_no_table_appears_on_two_pages():
    pages = {relative(p): read(p) for p in doc_files()}
    assert duplicated_tables(pages) == []


def option_defaults():
    """``{"--option" or "config.key": default as text}`` from the tools' parsers and libai_ext/config/keys.py."""
    from libai_ext.config import keys as config_keys

    defaults = {key.name: key.default for key in config_keys.KEYS}
    for name in ("check_equivalence", "check_batch", "compare_runs", "gpu_check", "make_text_data", "print_run"):
        parser = importlib.import_module(f"libai_ext.cli.{name}").build_parser()
        for action in parser._actions:
            if action.default not in (None, argparse_suppress()) and action.option_strings and action.nargs != 0:
                for option in action.option_strings:
                    if option.startswith("--"):
                        defaults.setdefault(option, str(action.default))
    return defaults


def argparse_suppress():
    import argparse

    return argparse.SUPPRESS


STATED_DEFAULT = re.compile(r"`((?:--|train\.|tokenization\.|graph\.|dataloader\.)[\w.-]+)`[^.;`]{0,40}?\(?default "
                            r"(`[^`]+`|-?\d[\d.]*(?:e-?\d+)?|True|False|true|false|\"[^\"]*\")")


def normalised(value):
    value = value.strip().strip("`\"'").rstrip(".")
    value = re.sub(r"\s*(s|seconds)$", "", value)
    try:
        return repr(float(value))
    except ValueError:
        return {"true": "True", "false": "False"}.get(value.lower(), value)


def default_problems(pages, defaults):
    problems = []
    for name, text in pages.items():
        for key, stated in STATED_DEFAULT.findall(prose_with_code(text)):
            if key in defaults and normalised(stated) != normalised(defaults[key].split(":")[0]):
                problems.append(f"{name}: {key} default {stated}, the code's is {defaults[key]}")
    return problems


def prose_with_code(text):
    return FENCE.sub("", text)


def test_every_default_a_page_states_is_the_codes():
    pages = {relative(p): read(p) for p in doc_files()}
    defaults = option_defaults()
    assert {"--timeout", "--rtol", "train.preemption.grace_s"} <= set(defaults)
    assert default_problems(pages, defaults) == []


def readme_ratios(text):
    return sorted(set(re.findall(r"(?<![\w.])(\d+\.\d+(?:-\d+\.\d+)?)x\b", prose(text))))


def summary_ranges(benchmarks_text):
    section = benchmarks_text.split("## The figures the README quotes", 1)[1].split("\n## ", 1)[0]
    return {row[1].removesuffix("x") for row in tables(section)[0]["rows"]}


def test_the_readmes_cost_ratios_are_the_measurement_pages_ranges():
    """A README ratio is a whole range of docs/benchmarks.md's summary, never one run of it."""
    ranges = summary_ranges(read(os.path.join(ROOT, "docs", "benchmarks.md")))
    ratios = readme_ratios(read(os.path.join(ROOT, "README.md")))
    assert ratios, "no cost ratio found in README.md"
    assert [r for r in ratios if r not in ranges] == [], f"the summary's ranges: {sorted(ranges)}"


def make_test_minutes_stated(text):
    return re.findall(r"`make test`[^.]{0,60}?(\d+(?:\.\d+)?) minutes", prose_with_code(text))


def test_the_test_times_stated_are_the_times_table():
    import json

    with open(os.path.join(ROOT, "benchmarks", "results", "test_times.json"), encoding="utf-8") as f:
        runs = {run["command"]: run for run in json.load(f)["runs"]}
    measured = f"{runs['make test']['minutes']:.1f}"
    stated = {relative(p): make_test_minutes_stated(read(p)) for p in doc_files()}
    assert stated["README.md"], "README.md does not say how long make test takes"
    assert {page: m for page, m in stated.items() if any(x != measured for x in m)} == {}
    counted = re.compile(r"\b\d[\d,]* tests of `make test`|`make test`[^.]{0,30}\b\d[\d,]* tests\b")
    assert [relative(p) for p in doc_files() if counted.search(prose(read(p)))] == [], \
        "a test count of make test outside docs/testing.md's generated table"


def test_every_version_named_is_a_version_of_the_changelog():
    import libai_ext

    versions = set(re.findall(r"^## (\d+\.\d+\.\d+)", read(os.path.join(ROOT, "CHANGELOG.md")), re.M))
    versions.add(libai_ext.__version__)
    named = {(relative(p), v) for p in doc_files() for v in re.findall(r"libai_ext (\d+(?:\.\d+)+)\b", read(p))}
    assert {(page, v) for page, v in named if v not in versions} == set()


def checkout_files_in_installed_commands(text):
    """Commands labelled as needing no checkout that still read a file of the checkout."""
    found = []
    for language, body in code_blocks(text):
        lines = body.replace("\\\n", " ").splitlines()
        for comment, command in zip(lines, lines[1:]):
            if comment.lstrip().startswith("#") and "no checkout" in comment and re.search(
                    r"(?<![\w/])(?:configs|tools|tests)/", command):
                found.append(command.strip())
    return found


def test_a_command_for_an_installed_package_reads_no_checkout_file():
    assert problems_on_every_page(checkout_files_in_installed_commands) == {}


def column_problems(text):
    """A paragraph right after a table that names a per-run column ("the best of each run") the table lacks."""
    problems = []
    lines = FENCE.sub("", text).split("\n")
    for table in tables(text):
        header = " ".join(table["header"]).lower()
        start = next(i for i, line in enumerate(lines) if line.startswith("|") and
                     [c.strip() for c in line.strip().strip("|").split("|")] == table["header"])
        after = "\n".join(lines[start + 2 + len(table["rows"]):]).lstrip("\n").split("\n\n", 1)[0]
        for word in re.findall(r"\bthe (best|worst|mean|median|final|last) of each run\b", after, re.I):
            if word.lower() not in header:
                problems.append(f"'{word} of each run' named after a table without such a column: {header[:80]}")
    return problems


def test_the_words_after_a_table_name_only_its_columns():
    assert problems_on_every_page(column_problems) == {}


def test_each_docs_check_catches_the_drift_it_is_for():
    """The checks above, on the drifts they exist for: each is found."""
    names = ["masks", "mask cost", "graph step", "resume", "generators", "pairing", "guard"]
    old = {"tools.md": "For a machine with GPUs. `make gpu-check` prints one row per check, in about 5 minutes; the "
                       "whole check stops after 9 minutes:\n\n| check | GPUs | what passes |\n|---|---|---|\n"
                       "| masks | 1 | x |\n| resume | 1 | x |\n| pairing | 2 | x |\n| guard | 2 | x |\n",
           "usage.md": "Graph mode on GPUs is untested here (`make gpu-check` does not cover it).\n",
           "Makefile": "# For a person with GPUs (under 10 minutes): gpu-check\n"}
    found = gpu_check_problems(old, 900, names)
    assert any("5 minutes" in p for p in found) and any("9 minutes" in p for p in found)
    assert any("10 minutes" in p for p in found) and any("graph mode" in p for p in found)
    assert any("outside the generated block" in p for p in found)
    assert gpu_check_problems({"ok": "`make gpu-check` stops after 15 minutes."}, 900, names) == []

    keys = "| key | default | what it does |\n|---|---|---|\n| `a` | `1` | x |\n| `b` | `2` | y |\n"
    assert duplicated_tables({"usage.md": keys, "checkpoints.md": keys.replace("| y |", "| z |")}) != []
    assert duplicated_tables({"a.md": keys, "b.md": keys.replace("`1`", "`3`").replace("`2`", "`4`")}) == []

    assert default_problems({"x.md": "`--timeout`, default 300 s; `train.preemption.grace_s` (default 25)"},
                            {"--timeout": "600", "train.preemption.grace_s": "25"}) == \
        ["x.md: --timeout default 300, the code's is 600"]
    assert readme_ratios("takes 1.035x the step, and 0.946-1.038x in graph mode") == ["0.946-1.038", "1.035"]
    assert make_test_minutes_stated("On a 2-core machine `make test` takes about 14 minutes") == ["14"]
    assert re.search(r"\b\d[\d,]* tests of `make test`", "The 645 tests of `make test` ran in 10.7 minutes")
    assert checkout_files_in_installed_commands(
        "```\n# installed package, no checkout\npython -m libai_ext.cli.train_net --config-file configs/a.py\n```")
    assert column_problems("| run | top-1 |\n|---|---|\n| a | 1 |\n\nTop-1 at 90, and the best of each run.\n")
    assert re.findall(r"libai_ext (\d+(?:\.\d+)+)\b", "from libai_ext 0.1 (stock)") == ["0.1"]
    assert README_JARGON.search("stock LiBai parts at iteration 0")


# --- facts the pages state, read from the code ----------------------------------------------------

def section_of(text, heading_start):
    """The text of the section whose heading starts with ``heading_start``, up to the next heading of its level."""
    match = re.search(rf"^(#+) {re.escape(heading_start)}", text, re.M)
    assert match, f"no section '{heading_start}...'"
    rest = text[match.end():]
    end = re.search(rf"^#{{1,{len(match.group(1))}}} ", rest, re.M)
    return rest[:end.start()] if end else rest


def test_the_console_scripts_listed_are_pyprojects():
    """install.md's table names every console script pyproject.toml installs, and tools.md's table every tool."""
    scripts = console_scripts()
    install = tables(section_of(read(os.path.join(ROOT, "docs", "install.md")), "Console scripts"))[0]["rows"]
    assert {row[0].strip("`"): row[1].strip("`") for row in install} == scripts
    tools = tables(section_of(read(os.path.join(ROOT, "docs", "tools.md")), "Every tool"))[0]["rows"]
    listed = {re.search(r"`(\w+)`", row[0]).group(1) for row in tools}
    assert listed == {module.rsplit(".", 1)[1] for module in scripts.values()}


EXIT_CODES_STATED = re.compile(r"Exit codes:(.*?)(?:\.(?:\s|$)|$)", re.S)


def exit_codes_stated(section):
    """The codes an ``Exit codes: 0 ..., 1 ..., 2 ...`` sentence of ``section`` gives, in order."""
    found = EXIT_CODES_STATED.findall(prose_with_code(section))
    return [[int(c) for c in re.findall(r"(?:^|,)\s*(\d+)\s", sentence.replace("\n", " "))] for sentence in found]


def test_every_tools_exit_codes_on_tools_md_are_its_own():
    """Each tool's section of docs/tools.md gives exactly the exit codes of the tool's ``EXIT_CODES``."""
    text = read(os.path.join(ROOT, "docs", "tools.md"))
    problems = {}
    for module in sorted(set(console_scripts().values())):
        name = module.rsplit(".", 1)[1]
        codes = [code for code, _ in importlib.import_module(module).EXIT_CODES]
        stated = exit_codes_stated(section_of(text, f"`{name}`"))
        if stated != [codes]:
            problems[name] = {"stated": stated, "the tool's": codes}
    assert problems == {}


def test_the_exit_code_check_reads_each_code():
    assert exit_codes_stated("Exit codes: 0 finished, 1 an error on a rank (every rank ends at once), 2 bad\n"
                             "arguments, 124 preempted, 130 a second signal, 143 committed.") == \
        [[0, 1, 2, 124, 130, 143]]


def module_constants(name):
    """``{NAME: value}`` of the literal module-level assignments of ``tests/<name>`` (read, not imported: no
    OneFlow, no LiBai line decided)."""
    import ast

    tree = ast.parse(read(os.path.join(ROOT, "tests", name)))
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found[node.targets[0].id] = node.value
    return tree, found




def libai_main_configs_trained():
    """``(trained, not trained, iterations)`` of tests/test_libai_main_configs.py."""
    import ast

    _, found = module_constants("test_libai_main_configs.py")
    trained = sorted(ast.literal_eval(key) for key in found["RUNS"].keys)
    untrained = sorted(ast.literal_eval(key) for key in found["NO_DATA"].keys)
    one = ast.literal_eval(found["ONE_ITERATION"])
    iterations = int(next(o for o in one if o.startswith("train.train_iter=")).split("=")[1])
    return trained, untrained, iterations


def zoo_layouts_and_iterations():
    """``({"libai_v0_1": [layouts], "libai_main": [layouts]}, iterations)`` of tests/test_zoo_equivalence.py."""
    import ast

    tree, found = module_constants("test_zoo_equivalence.py")
    without_dp = ast.literal_eval(found["WITHOUT_DP"])
    with_dp = found["WITH_DP"]  # [...] + ([] if <libai main> else [...])
    both, main_only_extra = ast.literal_eval(with_dp.left), with_dp.right
    layouts = {"libai_main": without_dp + both + ast.literal_eval(main_only_extra.body),
               "libai_v0_1": without_dp + both + ast.literal_eval(main_only_extra.orelse)}
    matrix = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "matrix")
    call = next(n for n in ast.walk(matrix) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "run_tool")
    return layouts, ast.literal_eval(call.args[2])


NUMBER_WORDS = {3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}


def sentences(text):
    """The sentences of ``text``'s paragraphs and list items (tables and headings left out), inline code kept."""
    found = []
    for block in re.split(r"\n\s*\n|\n(?=\s*[-*] |#)", prose_with_code(text)):
        if block.lstrip().startswith(("|", "#")):
            continue
        found += re.split(r"(?<=\.)\s+", re.sub(r"\s+", " ", block).strip())
    return found


def libai_main_claim_problems(pages, trained, untrained, iterations, main_layouts, zoo_iterations):
    """``["page: what"]`` where a page states which of LiBai main's configs train, or the layouts and iterations of
    LiBai main's RoBERTa, SwinV2 and ResMLP, other than the tests run them."""
    problems = []
    total = len(trained) + len(untrained)
    for name, text in pages.items():
        for sentence in sentences(text):
            if re.search(r"LiBai main's (?:own )?configs|configs? of LiBai main", sentence) and re.search(r"\btrain", sentence):
                if f"{total} of LiBai main's configs" not in sentence:
                    problems.append(f"{name}: not 'all {total} of LiBai main's configs': {sentence[:100]}")
                if not re.search(rf"\b{len(trained)} with data\b.*\b{iterations} iterations? each", sentence):
                    problems.append(f"{name}: not 'the {len(trained)} with data ... {iterations} iteration each': "
                                    f"{sentence[:100]}")
                if not all(f"`{config}`" in sentence for config in untrained):
                    problems.append(f"{name}: does not name the configs not trained {untrained}: {sentence[:100]}")
            if "RoBERTa, SwinV2 and ResMLP" in sentence and re.search(r"\blayouts\b", sentence):
                count = NUMBER_WORDS[len(main_layouts)]
                if f"{count} layouts" not in sentence or f"{zoo_iterations} iterations" not in sentence \
                        or "(2, 2, 2)" in sentence:
                    problems.append(f"{name}: LiBai main's zoo runs {count} layouts ({main_layouts}) for "
                                    f"{zoo_iterations} iterations: {sentence[:120]}")
    return problems


def test_what_the_pages_say_of_libai_mains_configs_and_models_is_what_the_tests_run():
    trained, untrained, iterations = libai_main_configs_trained()
    layouts, zoo_iterations = zoo_layouts_and_iterations()
    assert "dp2xtp2xpp2" in layouts["libai_v0_1"] and len(trained) > 1 and untrained
    pages = {relative(p): read(p) for p in doc_files()}
    problems = libai_main_claim_problems(pages, trained, untrained, iterations, layouts["libai_main"], zoo_iterations)
    assert problems == []
    readme = " ".join(sentences(pages["README.md"]))
    assert f"the {len(trained)} with data" in readme and "RoBERTa, SwinV2 and ResMLP" in readme


def test_the_libai_main_check_finds_an_overstated_claim():
    old = {"README.md": "Each config of LiBai main's configs trains with only the trainer line changed. On LiBai main "
                        "also RoBERTa, SwinV2 and ResMLP follow 1 rank on six layouts up to (2, 2, 2) over 20 "
                        "iterations."}
    found = libai_main_claim_problems(old, ["a", "b"], ["c"], 1, ["pp2", "tp2", "dp2"], 3)
    assert len(found) == 4, found
    good = {"README.md": "All 3 of LiBai main's configs load; the 2 with data here train 1 iteration each (`c` "
                         "downloads). The tests run RoBERTa, SwinV2 and ResMLP on three layouts for 3 iterations."}
    assert libai_main_claim_problems(good, ["a", "b"], ["c"], 1, ["pp2", "tp2", "dp2"], 3) == []


def upstream_bug_sections(text):
    """``{heading: body}`` of docs/upstream-bugs.md's numbered sections."""
    parts = re.split(r"^## (\d+\. .*)$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def repro_problems(text, root=ROOT):
    """A numbered section without a ``Repro:`` line naming an existing ``tools/repro/`` script, or a
    ``No repro script:`` line saying why."""
    problems = []
    for heading, body in upstream_bug_sections(text).items():
        repro = re.search(r"^Repro: .*?`(tools/repro/[\w.]+)", body, re.M)
        none = re.search(r"^No repro script: \S.{20,}", body, re.M)
        if repro and not os.path.isfile(os.path.join(root, repro.group(1))):
            problems.append(f"{heading}: {repro.group(1)} does not exist")
        elif not repro and not none:
            problems.append(f"{heading}: neither a 'Repro: `tools/repro/...`' nor a 'No repro script: why' line")
    return problems


def test_every_upstream_bug_has_a_repro_or_says_why_not():
    text = read(os.path.join(ROOT, "docs", "upstream-bugs.md"))
    assert len(upstream_bug_sections(text)) >= 30
    assert repro_problems(text) == []
    assert repro_problems("## 1. A\n\nText.\n\n## 2. B\n\nRepro: `tools/repro/nope.py` prints it.\n") == [
        "1. A: neither a 'Repro: `tools/repro/...`' nor a 'No repro script: why' line",
        "2. B: tools/repro/nope.py does not exist"]


# --- the word budget: what a newcomer reads in an hour --------------------------------------------

FIRST_READ = ("README.md", "docs/tutorial.md", "docs/usage.md")
FIRST_READ_WORDS, ALL_PAGES_WORDS = 3500, 35000


def word_count(text):
    """Words as ``wc -w`` counts them: runs of non-space characters."""
    return len(text.split())


def test_the_docs_fit_their_word_budget():
    counts = {relative(p): word_count(read(p)) for p in doc_files()}
    first = sum(counts[page] for page in FIRST_READ)
    assert first <= FIRST_READ_WORDS, {page: counts[page] for page in FIRST_READ}
    assert sum(counts.values()) <= ALL_PAGES_WORDS, sorted(counts.items(), key=lambda kv: -kv[1])[:8]
