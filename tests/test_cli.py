"""The command-line tools (``libai_ext.cli``, installed as ``libai-ext-*``; ``tools/*.py`` wrap them).

* every tool's ``--help`` states purpose, defaults, exit codes and examples with this project's
  configs, starts no OneFlow (none of its start-up messages), every example parses and writes
  outside the repository's own folders; ``--version`` prints ``libai_ext.__version__``; a missing
  config file or a bad argument is one line on stderr and exit code 2;
* ``key=value`` overrides before or after the options (stock LiBai hands a late ``--resume`` to
  Hydra, which fails);
* ``--fast-dev-run`` sets what LiBai main's train_net sets, after the user's overrides;
* the console scripts of pyproject.toml import, one per tool in tools/;
* ``train.dist.pipeline_num_layers`` against the model's layers: refused by name when the model has
  more layers, warned about when it has fewer (in-process; one real 2-rank run, pp2 with
  ``model.depth=2``, also runs ``--fast-dev-run`` placed after the overrides, as the module that
  ``python -m oneflow.distributed.launch -m libai_ext.cli.train_net`` starts);
* ``check_equivalence``'s progress lines and ``--plot`` (the plot is tested on synthetic loss
  lists, not on a real run).
"""
import importlib
import io
import json
import os
import re
import shlex
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from conftest import ROOT

TOOLS = ["train_net", "check_batch", "check_equivalence", "compare_runs", "gpu_check", "print_run", "make_text_data",
         "simulate_layout"]
SCRIPTS = {"libai-ext-train": "train_net", "libai-ext-check-batch": "check_batch",
           "libai-ext-check-equivalence": "check_equivalence", "libai-ext-compare-runs": "compare_runs",
           "libai-ext-gpu-check": "gpu_check", "libai-ext-print-run": "print_run",
           "libai-ext-make-text-data": "make_text_data", "libai-ext-simulate-layout": "simulate_layout"}
TOOLS_WITHOUT_CONFIG = ("simulate_layout",)  # takes model shapes, no LiBai config
ONEFLOW_NOISE = ("libibverbs", "CUDA driver", "cuda_device_descriptor")
PROJECT_CONFIGS = ("configs/demo_pipeline_cpu.py", "configs/demo_swin_digits_cpu.py", "configs/swin_cifar100.py",
                   "configs/libai_gpt2_cpu.py")


def cli(name):
    return importlib.import_module(f"libai_ext.cli.{name}")


def run_python(*args, timeout=60):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


# --- help ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def helps():
    """``{tool: (python -m output, tools/<tool>.py output)}``: both start the same tool."""
    found = {}
    for name in TOOLS:
        as_module = run_python("-m", f"libai_ext.cli.{name}", "--help")
        as_script = run_python(os.path.join(ROOT, "tools", f"{name}.py"), "--help")
        found[name] = (as_module, as_script)
    return found


@pytest.mark.parametrize("name", TOOLS)
def test_help_states_purpose_defaults_exit_codes_and_examples(helps, name):
    for out in helps[name]:
        assert out.returncode == 0, out.stderr
        assert out.stderr == "", out.stderr  # nothing from OneFlow's start-up
        text = out.stdout
        assert not any(noise in text for noise in ONEFLOW_NOISE), text
        assert text.startswith("usage:") and len(text.split("\n\n")[1]) > 80, text  # a description paragraph
        assert "\nexit codes:\n  0  " in text and "\nexamples:\n" in text, text
        for option, help_text in option_helps(text).items():  # each option says its default (or that it has none)
            assert option in ("-h", "--version") or "(default" in help_text or "(required)" in help_text, \
                (option, help_text)
        assert name in TOOLS_WITHOUT_CONFIG or any(config in text for config in PROJECT_CONFIGS), text
    assert helps[name][0].stdout.split("\n", 1)[1] == helps[name][1].stdout.split("\n", 1)[1]  # same tool


def option_helps(text):
    """``{first option string: its help, on one line}`` from a ``--help`` text's options section."""
    section = text.split("\noptions:\n", 1)[1].split("\n\n", 1)[0]
    entries = re.split(r"\n(?=  -)", section)
    return {entry.split()[0].rstrip(","): " ".join(entry.split()) for entry in entries}


def test_every_tool_prints_the_package_version():
    import libai_ext

    versions = {name: run_python("-m", f"libai_ext.cli.{name}", "--version") for name in TOOLS}
    assert {name: (out.returncode, out.stdout, out.stderr) for name, out in versions.items()} == \
        {name: (0, f"libai_ext {libai_ext.__version__}\n", "") for name in TOOLS}


CONFIG_TOOLS = ("train_net", "check_batch", "check_equivalence")


def test_a_missing_config_file_or_a_bad_argument_is_one_line_and_exit_code_2(tmp_path):
    """Every tool: no traceback from the config loader (stock LiBai's own parser and loader print one)."""
    missing = str(tmp_path / "no_such_config.py")
    layouts = {"check_equivalence": ["--layouts", "1", "pp2"]}
    cases = {f"{name} missing config": (name, ["--config-file", missing, *layouts.get(name, [])])
             for name in CONFIG_TOOLS}
    cases["train_net folder as config"] = ("train_net", ["--config-file", str(tmp_path)])
    cases.update({f"{name} bad argument": (name, ["--no-such-option"]) for name in TOOLS})
    started = {case: subprocess.Popen([sys.executable, "-m", f"libai_ext.cli.{name}", *argv], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, cwd=str(tmp_path),
                                      env=dict(os.environ, PYTHONPATH=ROOT))
               for case, (name, argv) in cases.items()}
    for case, process in started.items():
        stdout, stderr = process.communicate(timeout=120)
        assert (process.returncode, stdout, len(stderr.splitlines())) == (2, "", 1), (case, stderr)
        assert "Traceback" not in stderr and "error: " in stderr and "--help" in stderr, (case, stderr)
        if "config" in case:
            assert str(tmp_path) in stderr, (case, stderr)  # names the file
    from libai.config import LazyConfig

    with pytest.raises(FileNotFoundError):  # stock: LiBai's loader, a traceback
        LazyConfig.load(missing)


def tracked_folders():
    """The repository's own top-level folders (tracked by git), where no example may write."""
    out = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    return {path.split("/", 1)[0] for path in out.stdout.splitlines() if "/" in path}


def written_paths(words):
    """The paths a tool's arguments write to: --out/--plot/--workdir values and train.output_dir."""
    paths = [words[i + 1] for i, word in enumerate(words[:-1]) if word in ("--out", "--plot", "--workdir")]
    return paths + [word.split("=", 1)[1] for word in words if word.startswith("train.output_dir=")]


def test_help_examples_write_outside_the_repositorys_own_folders(helps):
    own = tracked_folders()
    assert {"docs", "configs", "libai_ext", "tests"} <= own
    writes = []
    for name in TOOLS:
        for command in help_examples(helps[name][0].stdout):
            writes += [(name, path) for path in written_paths(tool_arguments(command)[1])]
    assert writes, "no example writes anything: the check sees nothing"
    inside = [(name, path) for name, path in writes if os.path.normpath(path).split(os.sep)[0] in own]
    assert inside == []


def test_print_run_says_what_a_stock_run_is(tmp_path):
    from libai_ext.cli.common import STOCK_MEANING

    info = {"trainer": "libai.engine.default.DefaultTrainer", "wall_time_s": 3.0, "final_eval": {"Acc@1": 50.0},
            "stock": STOCK_MEANING}
    (tmp_path / "run_info.json").write_text(json.dumps(info))
    out = run_python("-m", "libai_ext.cli.print_run", str(tmp_path))
    assert out.returncode == 0 and out.stdout.splitlines() == [
        "libai.engine.default.DefaultTrainer: 3 s of training, final evaluation {'Acc@1': 50.0}", f"({STOCK_MEANING})"]


def test_no_tool_imports_oneflow_before_parsing():
    code = ("import sys\n" + "".join(f"import libai_ext.cli.{name}\n" for name in TOOLS)
            + "print(sorted(m for m in ('oneflow', 'libai') if m in sys.modules))")
    out = run_python("-c", code)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


def test_train_net_help_lists_the_plugins_keys_with_the_codes_defaults(helps):
    from libai_ext.engine.batch_check import BATCH_CHECK_MODES
    from libai_ext.engine.launch import DEFAULT_TRAINER
    from libai_ext.random import DEFAULT_RANDOMNESS, RANDOMNESS_MODES, SEED_SCOPES

    from libai_ext.config.keys import KEYS

    text = " ".join(helps["train_net"][0].stdout.split())  # line breaks as spaces
    assert {"train.randomness", "train.checkpointer.checksums", "train.stage0_only_loading"} <= {k.name for k in KEYS}
    for key in KEYS:  # the table libai_ext's keys live in, default included
        assert f" {key.name} " in text and f"(default {' '.join(key.default.split())})" in text, key.name
    for value in (*BATCH_CHECK_MODES, *RANDOMNESS_MODES, *SEED_SCOPES, DEFAULT_TRAINER):
        assert f'"{value}"' in text, value
    assert f'(default "{DEFAULT_RANDOMNESS}")' in text and f'(default "{DEFAULT_TRAINER}")' in text
    assert "cfg.yaml" not in text and "weight.pth" not in text  # LiBai's stock examples


def help_examples(text):
    """The commands of a help's examples section, continuation lines joined."""
    section = text.split("\nexamples:\n", 1)[1]
    commands, current = [], ""
    for line in section.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        current += " " + line.rstrip("\\").strip()
        if not line.endswith("\\"):
            commands.append(current.strip())
            current = ""
    return commands


def tool_arguments(command):
    """``(tool module name, its arguments)`` of a command that runs one of the tools."""
    words = shlex.split(command)
    for i, word in enumerate(words):
        if word in SCRIPTS:
            return SCRIPTS[word], words[i + 1:]
        match = re.fullmatch(r"tools/(\w+)\.py", word)
        if match:
            return match.group(1), words[i + 1:]
        if word == "-m" and words[i + 1].startswith("libai_ext.cli."):
            return words[i + 1].rpartition(".")[2], words[i + 2:]
    raise AssertionError(f"no tool in example {command!r}")


@pytest.mark.parametrize("name", TOOLS)
def test_every_help_example_parses_and_names_existing_configs(helps, name):
    commands = help_examples(helps[name][0].stdout)
    assert commands
    for command in commands:
        tool, words = tool_arguments(command)
        assert tool == name, command
        args = cli(tool).build_parser().parse_args(words)  # SystemExit(2) on a bad example
        configs = getattr(args, "config_file", None)
        configs = [configs] if isinstance(configs, str) else configs or []
        assert all(os.path.isfile(os.path.join(ROOT, config)) for config in configs), command


# --- options anywhere ---------------------------------------------------------------------------

def test_libai_parser_hands_a_late_option_to_hydra():
    """Stock behaviour: LiBai's parser takes everything after the first override as overrides."""
    from hydra.errors import OverrideParseException
    from libai.config import LazyConfig, default_argument_parser

    args = default_argument_parser().parse_args(["--config-file", "c.py", "train.train_iter=5", "--resume"])
    assert args.opts == ["train.train_iter=5", "--resume"] and not args.resume
    with pytest.raises(OverrideParseException, match="LexerNoViableAltException"):
        LazyConfig.apply_overrides(OmegaConf.create({"train": {"train_iter": 1}}), args.opts)


@pytest.mark.parametrize("name", ["train_net", "check_batch", "check_equivalence"])
def test_options_before_between_and_after_overrides(name):
    parser = cli(name).build_parser()
    extra = ["--layouts", "1", "pp2"] if name == "check_equivalence" else []
    argv = ["a.b=1", "--config-file", "dir=x/c.py", "c.d=[1,2]", *extra, "e.f=-3"]
    if name == "train_net":
        argv += ["--resume", "g.h=null", "--fast-dev-run"]
    args = parser.parse_args(argv)
    assert args.config_file in ("dir=x/c.py", ["dir=x/c.py"])  # an option's value is never an override
    assert args.opts == ["a.b=1", "c.d=[1,2]", "e.f=-3"] + (["g.h=null"] if name == "train_net" else [])
    if name == "train_net":
        assert args.resume and args.fast_dev_run
    if name == "check_equivalence":
        assert args.layouts == ["1", "pp2"]


def test_a_word_that_is_no_override_is_refused(capsys):
    with pytest.raises(SystemExit) as stop:
        cli("train_net").parse_args(["--config-file", "c.py", "train.train_iter=5", "resume"])
    assert stop.value.code == 2
    assert "unrecognized arguments: resume (config overrides are key=value)" in capsys.readouterr().err


# --- --fast-dev-run -----------------------------------------------------------------------------

def test_fast_dev_run_sets_libai_mains_keys_after_the_overrides():
    from libai.config import LazyConfig

    train_net = cli("train_net")
    args = train_net.parse_args(["--fast-dev-run", "--config-file", "configs/demo_pipeline_cpu.py",
                                 "train.train_iter=500", "train.train_epoch=3", "train.log_period=7"])
    assert args.opts[:3] == ["train.train_iter=500", "train.train_epoch=3", "train.log_period=7"]
    cfg = LazyConfig.apply_overrides(LazyConfig.load(os.path.join(ROOT, "configs", "demo_pipeline_cpu.py")),
                                     args.opts)
    assert (cfg.train.train_iter, cfg.train.train_epoch, cfg.train.evaluation.eval_period,
            cfg.train.log_period) == (20, 0, 10, 1)
    plain = train_net.parse_args(["--config-file", os.path.join(ROOT, "configs", "demo_pipeline_cpu.py"),
                                  "train.train_iter=500"])
    assert plain.opts == ["train.train_iter=500"]


# --- console scripts ----------------------------------------------------------------------------

def test_console_scripts_import_and_cover_every_tool():
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        section = f.read().split("[project.scripts]\n", 1)[1].split("\n[", 1)[0]
    scripts = dict(re.findall(r'^([\w-]+) = "([\w.:]+)"$', section, flags=re.M))
    assert {name: target.split(":")[0].rpartition(".")[2] for name, target in scripts.items()} == SCRIPTS
    for target in scripts.values():
        module, _, function = target.partition(":")
        assert callable(getattr(importlib.import_module(module), function)), target
    wrappers = sorted(f[:-3] for f in os.listdir(os.path.join(ROOT, "tools")) if f.endswith(".py"))
    assert wrappers == sorted(TOOLS)
    for name in wrappers:
        with open(os.path.join(ROOT, "tools", f"{name}.py")) as f:
            assert f"from libai_ext.cli.{name} import main" in f.read(), name


def test_rank_processes_run_the_module_with_this_package_importable():
    from libai_ext.cli.common import PACKAGE_ROOT, module_target, rank_environ

    assert module_target("libai_ext.cli.check_equivalence") == ("-m", "libai_ext.cli.check_equivalence")
    env = rank_environ({"PYTHONPATH": f"/elsewhere{os.pathsep}{PACKAGE_ROOT}"})
    assert env["PYTHONPATH"].split(os.pathsep) == [PACKAGE_ROOT, "/elsewhere"]
    assert os.path.isfile(os.path.join(PACKAGE_ROOT, "libai_ext", "cli", "check_equivalence.py"))


# --- pipeline_num_layers vs the model -------------------------------------------------------------

@pytest.fixture
def one_rank_demo():
    """configs/demo_pipeline_cpu.py's config and LiBai's dist util set up for one rank."""
    import libai_ext
    from libai.config import LazyConfig
    from libai.utils import distributed as dist

    libai_ext.apply_patches()
    cfg = LazyConfig.load(os.path.join(ROOT, "configs", "demo_pipeline_cpu.py"))
    cfg.train.dist.pipeline_parallel_size = 1
    dist.setup_dist_util(cfg.train.dist)
    return cfg


def build_mixer(depth):
    from libai_ext.models.pipeline_mixer import PipelineMixer

    return PipelineMixer(img_size=32, patch_size=4, embed_dim=32, depth=depth, num_classes=10)


def test_more_layers_than_pipeline_num_layers_is_refused_by_name(one_rank_demo):
    from libai.utils import distributed as dist

    from libai_ext.config.checks import recording_layer_indices

    cfg = one_rank_demo
    cfg.model.depth = 6
    with pytest.raises(IndexError):  # stock LiBai: a bare IndexError from its layer table
        build_mixer(6)
    with pytest.raises(ValueError, match=re.escape("layer_idx=4, past train.dist.pipeline_num_layers=4")
                       + ".*model.depth=6"):
        with recording_layer_indices(cfg):
            build_mixer(6)
    assert "get_layer_ranks" not in vars(dist.get_dist_util())  # the recorder is gone afterwards
    with recording_layer_indices(cfg) as used:
        model = build_mixer(4)
    assert used == {0, 1, 2, 3}
    from libai_ext.config.checks import modules_on, warn_on_pipeline_layer_mismatch

    assert warn_on_pipeline_layer_mismatch(cfg, model, {0, 1}) is None  # one stage: nothing is left empty
    assert modules_on(model, dist.get_dist_util().get_layer_ranks(-1))[-2:] == ["norm", "head"]


@pytest.mark.parametrize("table, stages, stage_ids, expected", [
    (4, 2, [0, 0], "stage 0 holds layers 0-1; stage 1 holds no layer, only norm, head (layer_idx -1)"),
    (8, 2, [0, 0, 0, 0, 1, 1], "the stages get [4, 2] of the model's layers: stage 0 holds layers 0-3; "
                               "stage 1 holds layers 4-5"),
    (8, 4, [0, 0, 1, 1], "stage 1 holds layers 2-3; stage 2 holds no layer; stage 3 holds no layer, only norm"),
    (4, 2, [0, 0, 1, 1], None),
    (10000, 1, [0, 0, 0], None),
])
def test_pipeline_layer_mismatch_message(table, stages, stage_ids, expected):
    from libai_ext.config.checks import layer_mismatch_message

    message = layer_mismatch_message(table, stages, stage_ids, ["norm", "head"], {"model.depth": len(stage_ids)})
    if expected is None:
        assert message is None
    else:
        assert message.startswith(f"train.dist.pipeline_num_layers={table} but the model has {len(stage_ids)} "
                                  f"layers (model.depth={len(stage_ids)}; ")
        assert expected in message and f"set train.dist.pipeline_num_layers={len(stage_ids)}" in message, message


def test_model_layer_keys_found_in_libai_style_configs():
    from libai_ext.config.checks import model_layer_keys

    cfg = OmegaConf.create({"model": {"depths": [2, 2, 6, 2], "embed_dim": 96,
                                      "cfg": {"hidden_layers": 12, "hidden_size": 768}}})
    assert model_layer_keys(cfg) == {"model.depths": [2, 2, 6, 2], "model.cfg.hidden_layers": 12}


@pytest.mark.long
def test_fast_dev_run_after_overrides_and_the_layer_warning_on_two_ranks(tmp_path):
    """One real run: pp2 with model.depth=2 under the demo's pipeline_num_layers=4, --fast-dev-run last.  Long
    tier: the warning's text and the stage table are checked in the quick tier without a launch
    (test_pipeline_layer_mismatch_message), and train_net's real 2-rank runs in tests/test_train_net.py."""
    from libai_ext.cli.common import module_target, rank_environ
    from libai_ext.testing import launch, read_raw_losses

    output = tmp_path / "run"
    args = ["--config-file", os.path.join(ROOT, "configs", "demo_pipeline_cpu.py"), f"train.output_dir={output}",
            f"dataloader.train.dataset.0.root.root={tmp_path}/data", "train.train_iter=300", "model.depth=2",
            "train.test_micro_batch_size=90", "--fast-dev-run"]
    result = launch(module_target("libai_ext.cli.train_net"), 2, args, timeout=300, env=rank_environ(),
                    workdir=str(tmp_path / "logs"))
    assert [r["iteration"] for r in read_raw_losses(output)] == list(range(20))
    with open(output / "config.yaml") as f:
        saved = f.read()
    assert "train_iter: 20" in saved and "log_period: 1" in saved and "eval_period: 10" in saved
    with open(output / "run_info.json") as f:
        assert json.load(f)["final_eval"]
    warning = ("train.dist.pipeline_num_layers=4 but the model has 2 layers (model.depth=2; layer_idx 0-1)")
    assert result.ranks_logging(warning) == [0], result.log(0)[-3000:]
    assert "stage 0 holds layers 0-1; stage 1 holds no layer, only norm, head (layer_idx -1)" in result.log(0)


# --- check_equivalence: progress and --plot -----------------------------------------------------

def test_progress_names_the_run_and_its_iteration(tmp_path, monkeypatch):
    tool = cli("check_equivalence")
    monkeypatch.setattr(tool, "PROGRESS_PERIOD_S", 0.0)
    stream = io.StringIO()
    progress = tool.RunProgress(3, 8, "dp2xpp2", 4, [str(tmp_path)], 5, stream=stream)
    progress.begin()
    progress()  # no losses.jsonl yet
    with open(tmp_path / "losses.jsonl", "w") as f:
        for i in range(4):
            f.write(json.dumps({"iteration": i, "total_loss": 1.0}) + "\n")
    progress()
    progress()  # unchanged: no new line
    progress.end(ok=True)
    lines = stream.getvalue().splitlines()
    prefix = "[3/8] layout dp2xpp2 on 4 ranks: "
    assert lines[:3] == [prefix + "starting ...", prefix + "iteration 0/5", prefix + "iteration 4/5"]
    assert re.fullmatch(r"\[3/8\] layout dp2xpp2 on 4 ranks: done in \d+ s", lines[3]) and len(lines) == 4


def test_plot_writes_a_png_of_every_layout(tmp_path):
    """Synthetic loss lists (no training run): an exact match, a tiny and a large difference."""
    tool = cli("check_equivalence")
    reference = [2.3 - 0.05 * i for i in range(20)]
    losses = {"1": reference, "pp2": list(reference), "dp2": [v * (1 + 3e-7) for v in reference],
              "tp2": [v * 1.02 for v in reference]}
    path = tmp_path / "plots" / "layouts.png"
    assert tool.plot_losses(losses, "1", str(path), rtol=1e-5, title="synthetic") == str(path)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20000


def test_plot_without_matplotlib_is_refused_before_any_run(tmp_path, monkeypatch, capsys):
    tool = cli("check_equivalence")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    launched = []
    monkeypatch.setattr(tool, "run_layout", lambda *a, **k: launched.append(a))
    status = tool.main(["--config-file", os.path.join(ROOT, "configs", "demo_pipeline_cpu.py"), "--layouts", "1",
                        "pp2", "--workdir", str(tmp_path), "--plot", str(tmp_path / "x.png")])
    assert status == tool.EXIT_USAGE == 2 and launched == []
    assert "--plot needs matplotlib" in capsys.readouterr().err


def test_make_text_data_default_is_the_configs_default():
    # The tool keeps its own copy so that --help imports no OneFlow.
    from libai_ext.cli import make_text_data
    from libai_ext.data import text_data

    assert make_text_data.DEFAULT_ROOT == text_data.DEFAULT_ROOT


def test_libai_ext_train_run_from_a_libai_checkout_imports_its_configs_and_projects(tmp_path):
    """LiBai's projects' configs import ``configs.common`` and ``projects.*`` from the checkout they are run in
    (SimCSE's and ConvNeXT's, by LiBai's tools/train_net.py): the console script reads them from there too."""
    (tmp_path / "configs" / "common").mkdir(parents=True)
    (tmp_path / "configs" / "common" / "train.py").write_text(
        "from omegaconf import OmegaConf\ntrain = OmegaConf.create(dict(output_dir='never', train_iter=1))\n")
    (tmp_path / "projects" / "Mine").mkdir(parents=True)
    (tmp_path / "projects" / "Mine" / "settings.py").write_text("WIDTH = 8\n")
    (tmp_path / "projects" / "Mine" / "config.py").write_text(
        "from configs.common.train import train\nfrom projects.Mine.settings import WIDTH\n"
        "model = dict(width=WIDTH)\n")
    script = os.path.join(os.path.dirname(sys.executable), "libai-ext-train")
    args = [script, "--list-patches", "--config-file", "projects/Mine/config.py"]
    found = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300, start_new_session=True)
    assert "No module named 'configs" not in found.stderr and "No module named 'projects" not in found.stderr, \
        found.stderr[-2000:]
    assert "libai_ext patches for projects/Mine/config.py" in found.stdout, found.stderr[-2000:]
