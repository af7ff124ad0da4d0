import contextlib
import importlib
import io
import os
import sys

import pytest

from libai_ext.testing import pin_to_device, ranks_device

# In-process tests create OneFlow tensors as well: on a GPU host this process runs on CPU too,
# unless LIBAI_EXT_TEST_DEVICE=cuda.  Set before any test module imports oneflow.
os.environ.update(pin_to_device(os.environ, ranks_device()))

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RANK_SCRIPTS = os.path.join(ROOT, "tests", "rank_scripts")


# LiBai's model zoo as this project's CPU configs: the models both LiBai lines have, then those only
# LiBai main has (0.1.1 has no RoBERTa, SwinV2 or ResMLP).
ZOO_BOTH_LINES = ("libai_gpt2_cpu", "libai_bert_cpu", "libai_t5_cpu", "libai_vit_digits_cpu", "libai_swin_digits_cpu")
ZOO_MAIN_ONLY = ("libai_roberta_cpu", "libai_swinv2_digits_cpu", "libai_resmlp_digits_cpu")
ZOO_TEXT = ("libai_gpt2_cpu", "libai_bert_cpu", "libai_t5_cpu", "libai_roberta_cpu")  # read text_data.root


def zoo_configs():
    """The zoo configs the installed LiBai line can train, in launch order."""
    from libai_ext.compat import detect, libai_main

    return list(ZOO_BOTH_LINES + (ZOO_MAIN_ONLY if detect.libai_line() is libai_main else ()))


def long_tier_selected(request):
    """Whether this pytest run selects long tests of the requesting test's file (``make test-all``, or a file of
    ``--long-tier-file``): a quick test whose case a long fixture of its file also runs can read that fixture's
    result instead of launching its own."""
    return any(getattr(item, "module", None) is request.module and item.get_closest_marker("long")
               for item in request.session.items)


def load_tool(name):
    """The module behind tools/<name>.py: ``libai_ext.cli.<name>`` (the script is a thin wrapper of it)."""
    return importlib.import_module(f"libai_ext.cli.{name}")


def check_equivalence(argv, configs, layouts):
    """``(status, {config: {layout: row cells}}, output)`` of one ``check_equivalence`` run in this process.

    Every config must report a row for every layout; the cells are those of the tool's table after the
    layout (ranks, max relative difference, ...)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = load_tool("check_equivalence").main(argv)
    text = out.getvalue()
    print(text)
    return status, equivalence_tables(text, configs, layouts), text


def equivalence_tables(text, configs, layouts):
    """``{config: {layout: row cells}}`` of ``check_equivalence``'s output ``text`` (see ``check_equivalence``)."""
    tables, config = {}, None
    for line in text.splitlines():
        name = line.split(":", 1)[0]
        if name in configs:
            config = name
            tables[config] = {}
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if config and line.startswith("| ") and cells[0] in layouts:
            tables[config][cells[0]] = cells[1:]
    assert sorted(tables) == sorted(configs), text
    for config in configs:
        assert sorted(tables[config]) == sorted(layouts), (config, text)
    return tables


def relative_differences(argv, configs, layouts):
    """``(status, {config: {layout: max relative difference}}, output)`` of one ``check_equivalence`` run."""
    status, tables, text = check_equivalence(argv, configs, layouts)
    return status, {config: {layout: float(cells[1]) for layout, cells in rows.items()}
                    for config, rows in tables.items()}, text


@contextlib.contextmanager
def working_folder(folder):
    """Within: ``folder`` (created) is the working directory (configs that build data under ./data share it)."""
    folder.mkdir(exist_ok=True)
    previous = os.getcwd()
    os.chdir(folder)
    try:
        yield folder
    finally:
        os.chdir(previous)


def rank_script(name):
    """Absolute path of a script under tests/rank_scripts (run on every rank)."""
    return os.path.join(RANK_SCRIPTS, name)


def records_of_every_rank(result, ranks=None, count=None):
    """{rank: records} for ``ranks`` (default: every rank of the job).

    A rank that wrote no record fails the test (a silent rank must not pass a loop over
    what the others reported); with ``count``, so does a rank that wrote another number.
    """
    ranks = list(range(result.nproc) if ranks is None else ranks)
    assert ranks, "no rank to read records from"
    by_rank = {}
    for rank in ranks:
        records = result.records(rank)
        assert records, f"rank {rank} wrote no records; its log tail:\n{result.log(rank)[-3000:]}"
        if count is not None:
            assert len(records) == count, f"rank {rank} wrote {len(records)} records, expected {count}"
        by_rank[rank] = records
    return by_rank


def assert_refused_without_hang(result, message, started="Starting training"):
    """A config refused before any rank talks to another: the job ends by itself, says why, runs nothing.

    Ranks reach the check seconds apart (imports), and OneFlow's launcher terminates the
    others once one exits, so only the ranks that got there first print the refusal.
    """
    assert not result.timed_out, f"the job hung; rank 0 log:\n{result.log(0)[-3000:]}"
    assert result.failed_ranks(), "no rank failed"
    assert result.ranks_logging(message), f"nobody said {message!r}; rank 0 log:\n{result.log(0)[-3000:]}"
    assert not result.ranks_logging(started), "a rank went on past the refusal"


def pytest_addoption(parser):
    parser.addoption("--long-tier-file", action="append", default=[], metavar="PATH",
                     help="run the long tests of this file only (repeatable): one session holds the quick tier of "
                          "every file given and the long tier of these (make test-libai-main)")


def pytest_collection_modifyitems(config, items):
    """With ``--long-tier-file``, deselect the long tests of every other file."""
    files = {os.path.realpath(path) for path in config.getoption("long_tier_file")}
    if not files:
        return
    kept, deselected = [], []
    for item in items:
        other_file = os.path.realpath(item.path) not in files
        (deselected if item.get_closest_marker("long") and other_file else kept).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def pytest_configure(config):
    """Print every skip's reason in the summary (as ``-rs``), e.g. the two-host test's where network
    namespaces are not permitted: a skipped test must be noticed, never pass silently."""
    if "s" not in config.option.reportchars and "a" not in config.option.reportchars:
        config.option.reportchars += "s"


@pytest.fixture(scope="session")
def repo_root():
    return ROOT


@pytest.fixture(scope="session")
def libai_text_data(tmp_path_factory):
    """The text data of the LiBai GPT-2/BERT configs, built once per session (about half a minute:
    LiBai's preprocess tool runs three times) in a temporary folder; returns its root."""
    from libai_ext.data.text_data import ensure_text_data

    return ensure_text_data(str(tmp_path_factory.mktemp("libai_text") / "data"))


@pytest.fixture(scope="session")
def demo_reference(repo_root, tmp_path_factory):
    """``reference(layout)``: {iteration: loss} of the demo's uninterrupted run on "pp2" or "dp2"
    (``demo_runs``), run once per session and shared by the fault and preemption tests."""
    from demo_runs import ITERS, NPROC, digits, train_args, train_net

    from libai_ext.testing import launch, read_raw_losses

    runs = {}

    def reference(layout):
        if layout not in runs:
            output = tmp_path_factory.mktemp(f"reference-{layout}")
            launch(train_net(repo_root), NPROC, train_args(repo_root, output / "run", digits(tmp_path_factory), layout,
                                                          period=ITERS), timeout=600, workdir=str(output / "logs"))
            runs[layout] = {r["iteration"]: r["total_loss"] for r in read_raw_losses(str(output / "run"))}
            assert sorted(runs[layout]) == list(range(ITERS)), runs[layout]
        return runs[layout]

    return reference


def copy_from_libai_source(dest, keep):
    """Copy into ``dest`` the files of LiBai main's source (``$LIBAI_MAIN_ARCHIVE``, else beside this repository; a
    folder or a ``.tar.gz``) whose path inside it, as a list of parts, ``keep`` accepts; returns ``dest``."""
    import shutil
    import tarfile

    from libai_ext.data.text_data import resolve_libai_source

    source = resolve_libai_source()
    if os.path.isdir(source):
        for folder, subfolders, files in os.walk(source):
            subfolders[:] = [name for name in subfolders if name != ".git"]
            for name in files:
                parts = os.path.relpath(os.path.join(folder, name), source).split(os.sep)
                if keep(parts):
                    os.makedirs(os.path.join(dest, *parts[:-1]), exist_ok=True)
                    shutil.copy(os.path.join(folder, name), os.path.join(dest, *parts))
        return dest
    with tarfile.open(source) as archive:
        for member in archive.getmembers():
            parts = member.name.split("/")[1:]  # under the archive's top folder
            if member.isfile() and parts and ".." not in parts and keep(parts):
                os.makedirs(os.path.join(dest, *parts[:-1]), exist_ok=True)
                with open(os.path.join(dest, *parts), "wb") as f:
                    f.write(archive.extractfile(member).read())
    return dest


@pytest.fixture(scope="session")
def libai_main_configs(tmp_path_factory):
    """LiBai main's own ``configs/`` folder, taken from its source (the installed packages do not ship it): the
    source folder's own, or extracted from its archive into a temporary folder; returns its path."""
    from libai_ext.data.text_data import resolve_libai_source

    source = resolve_libai_source()
    if os.path.isdir(source):
        return os.path.join(source, "configs")
    out = os.path.join(copy_from_libai_source(str(tmp_path_factory.mktemp("libai_main")),
                                              lambda parts: parts[0] == "configs"), "configs")
    assert os.path.isfile(os.path.join(out, "swin_cifar100.py")), f"{source}: no configs/swin_cifar100.py"
    return out


# Rank scripts import `common` as a sibling; tests import them rarely, but keep it importable.
sys.path.insert(0, RANK_SCRIPTS)
