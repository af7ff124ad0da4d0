"""Config keys nobody reads: warned about by name with the closest known key, refused when they misspell a
key of libai_ext's (``libai_ext.config.key_guard``).

* LiBai's keys come from the installed LiBai's source (``libai_keys``): a small package of known reads
  pins the scanner, and each LiBai line's own keys are found (main reads ``train.rdma_enabled``, 0.1.1 does
  not);
* no config of this repository, and none of LiBai main's own configs (loaded as LiBai loads them, from
  its source archive), draws a warning, except the one typo LiBai main ships (``train.eval_period`` in
  its ImageNet Swin configs, a key nothing reads); each check counts the keys it compared;
* the issue's typos, the model's, the optimizer's and the loaders' parameters (``LazyCall`` targets,
  LiBai's ``@configurable`` models), and one more key of libai_ext's added as one table entry;
* stock LiBai takes every one of these typos silently (OmegaConf adds the key, LiBai reads the default);
* ``libai-ext-train`` refuses ``train.randomnes=fast`` on 2 ranks without a hang; a user's own script
  (LiBai's ``default_setup``, then ``ConsistentBatchTrainer``) warns on rank 0 only and refuses on every
  rank, and the job ends by itself (long tier).
"""
import os
import sys

import pytest
from libai.config import LazyConfig, try_get_key

from conftest import ROOT, assert_refused_without_hang, rank_script, records_of_every_rank
from libai_ext.config import keys as config_keys
from libai_ext.compat import libai_line, libai_main
from libai_ext.config import key_guard
from libai_ext.config.libai_keys import LibaiSource, keys_under_roots, libai_reads
from libai_ext.testing import launch

LIBAI_MAIN = libai_line() is libai_main
DEMO = os.path.join(ROOT, "configs", "demo_pipeline_cpu.py")
REFUSED = "train.randomnes: not a key LiBai or libai_ext reads; did you mean train.randomness?"


def demo(*overrides, path=DEMO):
    return LazyConfig.apply_overrides(LazyConfig.load(path), list(overrides))


def findings(cfg):
    """``{key: (message, refused)}`` and the number of keys compared."""
    checker = key_guard.KeyChecker()
    found = checker.check(cfg)
    return {item.key: (str(item), item.refused) for item in found}, checker.compared


# --- LiBai's keys, from its source --------------------------------------------------------------

FAKE_LIBAI = {
    "__init__.py": "",
    "config.py": "def try_get_key(cfg, *keys, default=None):\n    return default\n",
    "utils/__init__.py": "",
    "utils/dist.py": (
        "class _Util:\n"
        "    def __init__(self, cfg):\n"
        "        self._sizes(cfg)\n"
        "    def _sizes(self, cfg):\n"
        "        self.tp = cfg.tensor_parallel_size\n"
        "        cfg.num_nodes = 1\n"
        "def setup_dist_util(cfg):\n"
        "    global _UTIL\n"
        "    _UTIL = _Util(cfg)\n"),
    "engine.py": (
        "from fakelibai.config import try_get_key\n"
        "from fakelibai.utils import dist\n"
        "def default_setup(cfg, args):\n"
        "    dist.setup_dist_util(cfg.train.dist)\n"
        "    cfg.train.resume = args.resume\n"
        "    for key, value in cfg.train.items():\n"  # a method, not a key
        "        pass\n"
        "class Trainer:\n"
        "    def __init__(self, cfg):\n"
        "        self.cfg = cfg\n"
        "        period = self.cfg.train.evaluation.eval_period\n"
        "        graph = cfg.graph.train_graph\n"
        "        graph.model = None\n"
        "        amp = try_get_key(cfg, 'train.amp.enabled', default=False)\n"
        "        log = cfg.train.get('log_period', 20)\n"
        "        loader = cfg.dataloader['train']\n"
        "        self.vocab(model_cfg=cfg.model)\n"
        "    def vocab(self, model_cfg):\n"
        "        return model_cfg.cfg.vocab_size\n"
        "def unrelated(conf):\n"
        "    return conf.not_the_config\n"),
}


def test_the_scanner_follows_reads_aliases_and_calls(tmp_path, monkeypatch):
    for name, text in FAKE_LIBAI.items():
        path = tmp_path / "fakelibai" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    keys = keys_under_roots(LibaiSource("fakelibai").reads())
    assert "fakelibai" not in sys.modules  # read, not imported
    assert keys == {
        "train", "train.dist", "train.dist.tensor_parallel_size", "train.dist.num_nodes",  # three calls deep
        "train.resume", "train.evaluation", "train.evaluation.eval_period", "graph", "graph.train_graph",
        "graph.train_graph.model", "train.amp", "train.amp.enabled", "train.log_period", "dataloader",
        "dataloader.train", "model", "model.cfg", "model.cfg.vocab_size"}


def test_the_installed_libais_keys_come_from_its_source():
    keys = libai_reads()
    read_by_both_lines = {"train.train_iter", "train.dist.tensor_parallel_size", "train.dist.num_nodes",
                          "train.evaluation.eval_period", "train.scheduler", "model.cfg.vocab_size", "graph.debug",
                          "dataloader.train.train_batch_size"}
    read_by_main_only = {"train.rdma_enabled", "train.input_placement_device", "train.checkpointer.max_to_keep",
                         "train.dist.custom_pipeline_stage_id", "train.evaluation.eval_after_n_epoch"}
    assert read_by_both_lines <= keys
    assert (read_by_main_only & keys) == (read_by_main_only if LIBAI_MAIN else set())
    assert not {"train.seed_scope", "train.randomness", "train.items"} & keys


# --- no false warning -----------------------------------------------------------------------------

PROJECT_CONFIGS = sorted(os.path.relpath(os.path.join(folder, name), ROOT)
                         for folder in (os.path.join(ROOT, "configs"), os.path.join(ROOT, "tests", "configs"))
                         for name in os.listdir(folder) if name.endswith(".py"))


@pytest.mark.parametrize("config", PROJECT_CONFIGS)
def test_no_config_of_this_repository_has_an_unknown_key(config):
    try:
        cfg = LazyConfig.load(os.path.join(ROOT, config))
    except ImportError as e:  # a config of LiBai main's models (ResMLP, SwinV2) on LiBai 0.1.1
        pytest.skip(f"{config} needs what this LiBai line lacks: {e}")
    found, compared = findings(cfg)
    assert found == {}
    assert compared >= 60, f"only {compared} keys compared"


def misspelt(model):
    """A typo of the model's first argument (``model.cfg.<x>`` for a model built from a cfg dict)."""
    node, path = (model.cfg, "model.cfg") if "cfg" in model else (model, "model")
    first = next(key for key in node if key != "_target_")
    return f"{path}.{first[:-1]}"


@pytest.mark.skipif(not LIBAI_MAIN, reason="LiBai main's configs import what only LiBai main has "
                                           "(make test-libai-main runs this)")
def test_libai_mains_own_configs_warn_only_about_the_typo_they_ship(libai_main_configs):
    folder = libai_main_configs  # conftest: extracted from LiBai main's source archive
    names = sorted(name for name in os.listdir(folder) if name.endswith(".py"))
    assert len(names) >= 10, names
    warned, total = {}, 0
    for name in names:
        cfg = LazyConfig.load(os.path.join(folder, name))  # as LiBai's tools/train_net.py loads it
        found, compared = findings(cfg)
        assert compared >= 60, (name, compared)
        total += compared
        if found:
            warned[name] = found
        typos = [misspelt(cfg.model), "train.randomnes"]  # the check sees a typo in this config's layout
        cfg = LazyConfig.apply_overrides(cfg, [f"{typo}=1" for typo in typos])
        assert sorted(set(findings(cfg)[0]) - set(found)) == sorted(typos), name
    typo = ("train.eval_period: not a key LiBai or libai_ext reads; did you mean train.evaluation.eval_period?",
            False)
    assert warned == {name: {"train.eval_period": typo} for name in ("swin_imagenet.py", "swinv2_imagenet.py")}
    # Stock LiBai: the key it meant keeps common/train.py's 5000, and nothing says so.
    cfg = LazyConfig.load(os.path.join(folder, "swin_imagenet.py"))
    assert (cfg.train.eval_period, cfg.train.evaluation.eval_period) == (1562, 5000)
    print(f"{len(names)} LiBai main configs, {total} keys compared")


# --- typos ----------------------------------------------------------------------------------------

def test_the_issues_typos_are_named_and_libai_exts_refused():
    cfg = demo("train.randomnes=fast", "train.batch_chek=every", "train.sed=5", "train.checkpointer.checksum=false",
               "train.checksums=false", "train.stage0_only_loadin=false", "train.seed_scop=rank",
               "train.randomness_note=mine")
    found, _ = findings(cfg)
    expected = {
        "train.randomnes": ("train.randomness", True), "train.batch_chek": ("train.batch_check", True),
        "train.sed": ("train.seed", False),  # LiBai's key: warned
        "train.checkpointer.checksum": ("train.checkpointer.checksums", True),
        "train.checksums": ("train.checkpointer.checksums", True),  # the right name at the wrong level
        "train.stage0_only_loadin": ("train.stage0_only_loading", True), "train.seed_scop": ("train.seed_scope", True),
        "train.randomness_note": ("train.randomness", False),  # a key of the user's own, merely alike
    }
    assert found == {key: (f"{key}: not a key LiBai or libai_ext reads; did you mean {meant}?", refused)
                     for key, (meant, refused) in expected.items()}
    # Stock LiBai: every override is taken, and the keys meant keep their defaults.
    assert try_get_key(cfg, "train.randomness") == "layout_invariant" and cfg.train.randomnes == "fast"
    assert cfg.train.seed == 1234 and cfg.train.sed == 5


def test_model_optim_and_loader_keys_are_checked_against_their_targets():
    """``LazyCall`` nodes against their target's parameters, nested ones (a loader's datasets, the
    evaluator) too.  A target taking ``**kwargs`` accepts any key: LiBai's loader builders hand theirs to
    OneFlow's DataLoader, which refuses an unknown one itself."""
    cfg = demo("model.embed_dm=48", "optim.lrr=0.1", "dataloader.train.dataset.0.trainn=true",
               "graph.enabeld=true", "train.dist.pipeline_num_layer=2", "train.evaluation.evaluator.topkk=[1]",
               "dataloader.train.num_workers=1")
    found, _ = findings(cfg)
    parameter = "{}: not a parameter of {} ({}._target_); did you mean {}?"
    key = "{}: not a key LiBai or libai_ext reads; did you mean {}?"
    assert {name: message for name, (message, _) in found.items()} == {
        "model.embed_dm": parameter.format("model.embed_dm", "libai_ext.models.pipeline_mixer.PipelineMixer",
                                           "model", "model.embed_dim"),
        "optim.lrr": parameter.format("optim.lrr", "oneflow.nn.optimizer.adamw.AdamW", "optim", "optim.lr"),
        "dataloader.train.dataset.0.trainn": parameter.format(
            "dataloader.train.dataset.0.trainn", "libai_ext.data.cifar.CIFAR100Folder", "dataloader.train.dataset.0",
            "dataloader.train.dataset.0.train"),
        "train.evaluation.evaluator.topkk": parameter.format(
            "train.evaluation.evaluator.topkk", "libai.evaluation.cls_evaluator.ClsEvaluator",
            "train.evaluation.evaluator", "train.evaluation.evaluator.topk"),
        "graph.enabeld": key.format("graph.enabeld", "graph.enabled"),
        "train.dist.pipeline_num_layer": key.format("train.dist.pipeline_num_layer", "train.dist.pipeline_num_layers"),
    }
    assert not any(refused for _, refused in found.values())


def test_a_libai_model_built_from_a_cfg_dict_is_checked_against_its_constructor():
    """LiBai's ``@configurable`` GPT: ``model.cfg`` holds the constructor's arguments."""
    cfg = demo("model.cfg.hiden_size=32", path=os.path.join(ROOT, "configs", "libai_gpt2_cpu.py"))
    found, _ = findings(cfg)
    assert list(found) == ["model.cfg.hiden_size"]
    assert found["model.cfg.hiden_size"][0].endswith("did you mean model.cfg.hidden_size?")
    assert "not read by libai.models.gpt_model.GPTForPreTraining" in found["model.cfg.hiden_size"][0]


def test_a_new_key_of_libai_exts_is_one_table_entry(monkeypatch):
    """What another key of the plugin takes: one ``ConfigKey``; its typo is refused, its help printed."""
    added = config_keys.ConfigKey("train.watchdog.timeout_s", "30", "seconds a step may take", config_keys.PLUGIN)
    before, _ = findings(demo("train.watchdog.timeout_s=5"))
    assert before["train.watchdog"][1] is False  # not known yet: warned
    monkeypatch.setattr(config_keys, "KEYS", config_keys.KEYS + (added,))
    assert findings(demo("train.watchdog.timeout_s=5"))[0] == {}
    found, _ = findings(demo("train.watchdog.timeout=5", "train.watchdog.signal=TERM"))
    assert found["train.watchdog.timeout"] == (
        "train.watchdog.timeout: not a key LiBai or libai_ext reads; did you mean train.watchdog.timeout_s?", True)
    assert found["train.watchdog.signal"][1] is True  # a node of libai_ext's own: any unknown key in it
    assert "train.watchdog.timeout_s" in config_keys.help_text()


def test_a_misspelt_augmentation_check_key_is_refused_naming_the_key():
    found, _ = findings(demo("train.augmentation_check.perod=5"))
    assert found["train.augmentation_check.perod"] == (
        "train.augmentation_check.perod: not a key LiBai or libai_ext reads; did you mean "
        "train.augmentation_check.period?", True)
    assert findings(demo("train.augmentation_check.period=5", "train.augmentation_check.action=warn"))[0] == {}


def test_a_misspelt_preemption_key_is_refused_naming_the_key():
    found, _ = findings(demo("train.preemption.grace=5", "train.preemption.signal=SIGTERM"))
    assert found["train.preemption.grace"] == (
        "train.preemption.grace: not a key LiBai or libai_ext reads; did you mean train.preemption.grace_s?", True)
    assert found["train.preemption.signal"] == (
        "train.preemption.signal: not a key LiBai or libai_ext reads; did you mean train.preemption.signals?", True)
    assert findings(demo("train.preemption.grace_s=5", "train.preemption.signals=[SIGUSR1]"))[0] == {}


def test_the_guard_warns_once_and_refuses_by_name(caplog):
    key_guard._reported.clear()
    with caplog.at_level("WARNING", logger="libai_ext"):
        key_guard.guard_config_keys(demo("train.sed=5"))
        key_guard.guard_config_keys(demo("train.sed=5"))  # the trainer checks again after train_net: said once
    assert [r.getMessage() for r in caplog.records] == [
        "train.sed: not a key LiBai or libai_ext reads; did you mean train.seed?"]
    with pytest.raises(key_guard.UnknownConfigKeyError, match=REFUSED.replace("?", r"\?")):
        key_guard.guard_config_keys(demo("train.randomnes=fast"))


# --- on ranks -------------------------------------------------------------------------------------

def test_train_net_refuses_a_misspelt_key_of_libai_exts_on_every_rank(tmp_path):
    args = ["--config-file", DEMO, f"train.output_dir={tmp_path}/run", f"dataloader.train.dataset.0.root.root="
            f"{tmp_path}/data", "train.randomnes=fast"]
    result = launch(os.path.join(ROOT, "tools", "train_net.py"), 2, args, timeout=300, check=False,
                    stop_on_failure=False, workdir=str(tmp_path / "logs"))
    assert_refused_without_hang(result, REFUSED, started="LiBai set-up done")


@pytest.mark.long
def test_a_users_script_warns_on_rank_0_and_every_rank_refuses_without_a_hang(tmp_path):
    """LiBai's default_setup, then ``ConsistentBatchTrainer(cfg)``: the trainer checks the keys itself."""
    args = ["--config-file", DEMO, f"train.output_dir={tmp_path}/run",
            f"dataloader.train.dataset.0.root.root={tmp_path}/data", "train.sed=5", "train.randomnes=fast"]
    result = launch(rank_script("key_guard.py"), 2, args, timeout=300, check=False, stop_on_failure=False,
                    workdir=str(tmp_path / "logs"))
    assert not result.timed_out, f"the job hung; rank 1 log:\n{result.log(1)[-3000:]}"
    records = {rank: found[0] for rank, found in records_of_every_rank(result, count=1).items()}
    warning = "train.sed: not a key LiBai or libai_ext reads; did you mean train.seed?"
    assert {rank: record["warnings"] for rank, record in records.items()} == {0: [warning], 1: []}
    assert all(record["refused"].startswith(REFUSED) for record in records.values()), records
    assert result.ended_with(1), result.returncodes  # the refusal ends each rank's script, as a user's would
