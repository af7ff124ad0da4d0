"""Committed checkpoints in one process: what a save leaves, what resume takes, what errors name.

The commit protocol's multi-rank behaviour (a rank killed at each phase of a save) is
``tests/test_checkpoint_faults.py``; here every piece runs in-process, in seconds: the folder
a save leaves, the manifest's checks (a truncated file, a same-size overwrite, a missing one),
the choice ``--resume`` makes among committed, uncommitted, damaged and stock-written folders,
retention, and the error every bad file gets.
"""
import json
import logging
import os
import shutil

import numpy as np
import oneflow as flow
import pytest
from libai.utils import distributed as dist
from libai.utils.checkpoint import Checkpointer
from omegaconf import DictConfig, OmegaConf

from libai_ext.checkpoint import committed
from libai_ext.checkpoint.files import MANIFEST, CheckpointDamaged, read_manifest, rng_state_path, staging_name
from libai_ext.checkpoint.resume import choose_resume_checkpoint, scan_for_resume
from libai_ext.testing import fault_injection


class Tiny(flow.nn.Module):
    def __init__(self):
        super().__init__()
        placement = flow.placement("cpu", [0])
        self.weight = flow.nn.Parameter(flow.randn(6, 5).to_global(placement=placement, sbp=flow.sbp.broadcast))
        self.bias = flow.nn.Parameter(flow.zeros(5).to_global(placement=placement, sbp=flow.sbp.broadcast))

    def forward(self, x):
        return x @ self.weight + self.bias


@pytest.fixture(autouse=True)
def one_rank_layout():
    dist.setup_dist_util(DictConfig({"data_parallel_size": 1, "tensor_parallel_size": 1,
                                     "pipeline_parallel_size": 1, "pipeline_num_layers": 1}))


def trained_parts():
    model = Tiny()
    optimizer = flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = flow.optim.lr_scheduler.StepLR(optimizer, step_size=10)
    x = flow.ones(2, 6).to_global(placement=flow.placement("cpu", [0]), sbp=flow.sbp.broadcast)
    model(x).sum().backward()
    optimizer.step()
    scheduler.step()
    return model, optimizer, scheduler


def checkpointer(save_dir, checksums=True):
    model, optimizer, scheduler = trained_parts()
    return committed.CommittedCheckpointer(model, str(save_dir), checksums=checksums, optimizer=optimizer,
                                           lr_scheduler=scheduler)


def tensor_files(folder):
    return sorted(str(p) for p in folder.glob("model/*/out"))


def test_a_save_commits_every_part_then_moves_last_checkpoint(tmp_path):
    checkpointer(tmp_path).save("model_0000004", iteration=4)
    folder = tmp_path / "model_0000004"
    assert sorted(os.listdir(tmp_path)) == ["last_checkpoint", "model_0000004"]  # nothing left under a temp name
    assert (tmp_path / "last_checkpoint").read_text() == "model_0000004"
    manifest = read_manifest(str(folder))
    assert manifest["iteration"] == 4 and manifest["world_size"] == 1 and manifest["checksum"] == "crc32"
    listed = set(manifest["files"])
    on_disk = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()} - {MANIFEST}
    assert listed == on_disk
    assert "libai_ext/rng_state/rank_0.pkl" in listed
    assert {name.split("/")[0] for name in listed} == {"model", "optimizer", "lr_scheduler", "libai_ext"}
    for name, record in manifest["files"].items():
        assert record["size"] == (folder / name).stat().st_size and len(record["crc32"]) == 8


def test_stock_libai_still_loads_a_committed_folder(tmp_path):
    source = checkpointer(tmp_path)
    source.save("model_0000004", iteration=4)
    model, optimizer, scheduler = trained_parts()
    extra = Checkpointer(model, str(tmp_path), optimizer=optimizer, lr_scheduler=scheduler).load(
        str(tmp_path / "model_0000004"))
    assert np.array_equal(model.weight.to_local().numpy(), source.model.weight.to_local().numpy())
    assert extra["iter"] == 4 and extra["libai_ext"]["manifest"] == MANIFEST


def test_saving_a_committed_name_again_replaces_it_whole(tmp_path):
    first = checkpointer(tmp_path)
    first.save("model_best")
    second = checkpointer(tmp_path)
    second.save("model_best")
    loaded = trained_parts()[0]
    Checkpointer(loaded, str(tmp_path)).load(str(tmp_path / "model_best"), checkpointables=[])
    assert np.array_equal(loaded.weight.to_local().numpy(), second.model.weight.to_local().numpy())
    assert not np.array_equal(loaded.weight.to_local().numpy(), first.model.weight.to_local().numpy())
    assert sorted(os.listdir(tmp_path)) == ["last_checkpoint", "model_best"]


def test_an_interrupted_save_of_the_same_name_is_cleared_first(tmp_path):
    stale = tmp_path / staging_name("model_0000009")
    (stale / "model").mkdir(parents=True)
    (stale / "model" / "half_written").write_bytes(b"x")
    checkpointer(tmp_path).save("model_0000009", iteration=9)
    assert not stale.exists()
    assert "model/half_written" not in read_manifest(str(tmp_path / "model_0000009"))["files"]


@pytest.fixture
def two_checkpoints(tmp_path):
    saver = checkpointer(tmp_path)
    saver.save("model_0000004", iteration=4)
    saver.save("model_0000009", iteration=9)
    return tmp_path


def test_resume_takes_what_last_checkpoint_names_when_it_is_intact(two_checkpoints):
    choice = scan_for_resume(str(two_checkpoints), checksums=True)
    assert (choice.chosen, choice.skipped, choice.unverified) == ("model_0000009", [], False)
    (two_checkpoints / "last_checkpoint").write_text("model_0000004")  # a user pointing back on purpose
    assert scan_for_resume(str(two_checkpoints), checksums=True).chosen == "model_0000004"


def test_resume_skips_an_uncommitted_save_and_names_it(two_checkpoints):
    shutil.copytree(two_checkpoints / "model_0000009", two_checkpoints / staging_name("model_0000014"))
    os.remove(two_checkpoints / staging_name("model_0000014") / MANIFEST)
    choice = scan_for_resume(str(two_checkpoints), checksums=True)
    assert choice.chosen == "model_0000009"
    assert choice.skipped == [("model_0000014.uncommitted", "its save was interrupted before the commit")]
    assert choice.leftovers == ["model_0000014.uncommitted"]


@pytest.mark.parametrize("damage, reason", [
    ("truncate", r"model/global_tensor_\d+/out has 40 bytes, the manifest says 120"),
    ("overwrite", r"model/global_tensor_\d+/out fails its CRC-32 check"),
    ("delete", r"model/global_tensor_\d+/out is missing"),
])
def test_resume_falls_back_past_a_damaged_checkpoint_and_names_the_file(two_checkpoints, damage, reason):
    target = max(tensor_files(two_checkpoints / "model_0000009"), key=os.path.getsize)  # the 6x5 weight
    if damage == "truncate":
        os.truncate(target, 40)
    elif damage == "overwrite":
        with open(target, "r+b") as f:
            f.write(np.random.default_rng(0).bytes(os.path.getsize(target)))
    else:
        os.remove(target)
    choice = scan_for_resume(str(two_checkpoints), checksums=True)
    assert choice.chosen == "model_0000004"
    [(name, why)] = choice.skipped
    assert name == "model_0000009" and why.startswith("damaged: ")
    assert __import__("re").search(reason, why), why


def test_without_checksums_sizes_are_still_checked(two_checkpoints):
    target = max(tensor_files(two_checkpoints / "model_0000009"), key=os.path.getsize)
    with open(target, "r+b") as f:
        f.write(b"\xff" * os.path.getsize(target))
    assert scan_for_resume(str(two_checkpoints), checksums=False).chosen == "model_0000009"  # not seen
    assert scan_for_resume(str(two_checkpoints), checksums=True).chosen == "model_0000004"
    os.truncate(target, 8)
    assert scan_for_resume(str(two_checkpoints), checksums=False).chosen == "model_0000004"


def test_a_missing_pointer_target_and_a_lost_pointer_fall_back_to_the_newest(two_checkpoints):
    (two_checkpoints / "last_checkpoint").write_text("model_0000012")
    choice = scan_for_resume(str(two_checkpoints), checksums=True)
    assert choice.chosen == "model_0000009"
    assert choice.skipped == [("model_0000012", "last_checkpoint names it, but there is no such folder")]
    os.remove(two_checkpoints / "last_checkpoint")
    assert scan_for_resume(str(two_checkpoints), checksums=True).chosen == "model_0000009"


def test_every_checkpoint_damaged_is_refused_naming_each(two_checkpoints):
    for name in ("model_0000004", "model_0000009"):
        os.truncate(max(tensor_files(two_checkpoints / name), key=os.path.getsize), 4)
    choice = scan_for_resume(str(two_checkpoints), checksums=True)
    assert choice.chosen is None
    assert "model_0000004: damaged" in choice.refusal and "model_0000009: damaged" in choice.refusal


def test_a_stock_libai_folder_is_resumed_unverified_and_a_half_written_one_is_named(tmp_path):
    model, optimizer, scheduler = trained_parts()
    stock = Checkpointer(model, str(tmp_path), optimizer=optimizer, lr_scheduler=scheduler)
    stock.save("model_0000004")
    choice = scan_for_resume(str(tmp_path), checksums=True)
    assert (choice.chosen, choice.unverified) == ("model_0000004", True)
    target = max(tensor_files(tmp_path / "model_0000004"), key=os.path.getsize)
    os.truncate(target, 12)
    os.remove(tmp_path / "model_0000004" / "optimizer" / "pickled_data")
    choice = scan_for_resume(str(tmp_path), checksums=True)
    why = dict(choice.skipped)["model_0000004"]
    assert "optimizer/ is incomplete" in why and f"{os.path.relpath(target, tmp_path / 'model_0000004')} has " \
        "12 bytes, its meta says 120" in why


def test_a_damaged_stock_folder_fails_to_load_naming_its_file(tmp_path):
    """What OneFlow's loader reports as a bare AssertionError names the checkpoint and the file."""
    model, optimizer, scheduler = trained_parts()
    Checkpointer(model, str(tmp_path), optimizer=optimizer, lr_scheduler=scheduler).save("model_0000004")
    target = max(tensor_files(tmp_path / "model_0000004"), key=os.path.getsize)
    os.truncate(target, 12)
    loader = checkpointer(tmp_path)
    with pytest.raises(CheckpointDamaged, match=r"checkpoint .*model_0000004 is damaged: model/global_tensor_\d+/out "
                                                r"has 12 bytes, its meta says 120"):
        loader.load(str(tmp_path / "model_0000004"))


def test_stock_libai_fails_on_it_with_a_bare_assertion(tmp_path):
    """The same damage through LiBai's own loader: an AssertionError that names neither folder nor file."""
    model, optimizer, scheduler = trained_parts()
    stock = Checkpointer(model, str(tmp_path), optimizer=optimizer, lr_scheduler=scheduler)
    stock.save("model_0000004")
    os.truncate(max(tensor_files(tmp_path / "model_0000004"), key=os.path.getsize), 12)
    with pytest.raises(AssertionError) as caught:
        stock.load(str(tmp_path / "model_0000004"))
    assert "model_0000004" not in str(caught.value) and "global_tensor" not in str(caught.value)


def test_a_truncated_random_state_is_caught_before_any_rank_loads(two_checkpoints):
    os.truncate(rng_state_path(str(two_checkpoints / "model_0000009"), 0), 10)
    choice = scan_for_resume(str(two_checkpoints), checksums=False)
    assert choice.chosen == "model_0000004"
    assert "libai_ext/rng_state/rank_0.pkl has 10 bytes" in dict(choice.skipped)["model_0000009"]


def test_a_libai_ext_0_1_checkpoint_restores_its_random_state_from_beside_it(tmp_path):
    """libai_ext 0.1 kept the random state in <output_dir>/rng_state/<checkpoint>/rank_<r>.pkl."""
    from libai_ext.checkpoint.rng_state import RNGStateCheckpointer

    model, optimizer, scheduler = trained_parts()
    np.random.seed(21)
    RNGStateCheckpointer(model, str(tmp_path), optimizer=optimizer, lr_scheduler=scheduler).save("model_0000004")
    expected = float(np.random.rand())
    assert (tmp_path / "rng_state" / "model_0000004" / "rank_0.pkl").is_file()
    np.random.seed(5)
    checkpointer(tmp_path).load(str(tmp_path / "model_0000004"))
    assert float(np.random.rand()) == expected


def test_initial_weights_are_verified_before_loading(two_checkpoints):
    target = max(tensor_files(two_checkpoints / "model_0000009"), key=os.path.getsize)
    with open(target, "r+b") as f:
        f.write(b"\x00" * 8)
    with pytest.raises(CheckpointDamaged, match=r"model_0000009 is damaged: model/global_tensor_\d+/out fails its CRC"):
        checkpointer(two_checkpoints).load(str(two_checkpoints / "model_0000009"), checkpointables=[])


def test_random_state_of_a_committed_checkpoint_is_restored(tmp_path):
    saver = checkpointer(tmp_path)
    flow.manual_seed(11), np.random.seed(11)
    saver.save("model_0000004", iteration=4)
    expected = float(np.random.rand())
    np.random.seed(99)
    checkpointer(tmp_path).load(str(tmp_path / "model_0000004"))
    assert float(np.random.rand()) == expected
    assert os.path.isfile(rng_state_path(str(tmp_path / "model_0000004"), 0))


def resume_config(output_dir, resume=True):
    return OmegaConf.create({"train": {"output_dir": str(output_dir), "resume": resume,
                                       "checkpointer": {"checksums": True}}})


def test_resume_rewrites_last_checkpoint_removes_interrupted_saves_and_says_why(two_checkpoints, caplog):
    os.truncate(max(tensor_files(two_checkpoints / "model_0000009"), key=os.path.getsize), 4)
    (two_checkpoints / staging_name("model_0000014")).mkdir()
    with caplog.at_level(logging.WARNING):
        choice = choose_resume_checkpoint(resume_config(two_checkpoints))
    assert choice.chosen == "model_0000004"
    assert (two_checkpoints / "last_checkpoint").read_text() == "model_0000004"
    assert not (two_checkpoints / staging_name("model_0000014")).exists()
    assert f"skipping {two_checkpoints}/model_0000014.uncommitted: its save was interrupted" in caplog.text
    assert f"skipping {two_checkpoints}/model_0000009: damaged: model/" in caplog.text


def test_resume_with_no_checkpoint_says_so_naming_the_output_dir(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        assert choose_resume_checkpoint(resume_config(tmp_path / "mistyped")).chosen is None
    assert f"--resume: no checkpoint found in {tmp_path}/mistyped: training from scratch" in caplog.text
    assert choose_resume_checkpoint(resume_config(tmp_path, resume=False)) is None


def test_resume_refuses_on_every_rank_when_all_are_damaged(two_checkpoints):
    for name in ("model_0000004", "model_0000009"):
        os.remove(two_checkpoints / name / MANIFEST.replace("manifest.json", "pickled_data"))
    with pytest.raises(RuntimeError, match=r"no checkpoint in .* can be resumed: model_0000009: damaged: "
                                           r"libai_ext/pickled_data is missing \| model_0000004: damaged: "):
        choose_resume_checkpoint(resume_config(two_checkpoints))


class Hook:
    """``CommittedPeriodicCheckpointer`` driven without a trainer."""

    def __init__(self, save_dir, keep):
        self.hook = committed.CommittedPeriodicCheckpointer(checkpointer(save_dir), 5, max_to_keep=keep)
        self.hook.max_iter = 1000

    def after_iterations(self, *iterations):
        for iteration in iterations:
            self.hook.step(iteration)


def test_retention_keeps_the_newest_committed_checkpoints(tmp_path):
    Hook(tmp_path, keep=2).after_iterations(4, 9, 14, 19)
    assert sorted(os.listdir(tmp_path)) == ["last_checkpoint", "model_0000014", "model_0000019"]


def test_retention_never_deletes_the_last_commit_while_a_newer_save_is_uncommitted(tmp_path):
    hook = Hook(tmp_path, keep=1)
    hook.after_iterations(4)
    hook.hook.saved.append("model_0000009")  # as if that save had been interrupted before its commit
    (tmp_path / staging_name("model_0000009")).mkdir()
    hook.hook._delete_beyond_keep()
    assert (tmp_path / "model_0000004").is_dir()


def test_retention_never_deletes_what_last_checkpoint_names(tmp_path):
    hook = Hook(tmp_path, keep=1)
    hook.after_iterations(4)
    (tmp_path / "last_checkpoint").write_text("model_0000004")  # e.g. pointed back by hand
    hook.hook.checkpointer.tag_last_checkpoint = lambda name: None
    hook.after_iterations(9)
    assert sorted(os.listdir(tmp_path)) == ["last_checkpoint", "model_0000004", "model_0000009"]


def test_fault_injection_is_off_by_default_and_refuses_a_malformed_request(monkeypatch):
    monkeypatch.delenv(fault_injection.KILL_AT_ENV, raising=False)
    fault_injection.fault_point("mid_weights", "model_0000004")  # nothing happens
    assert fault_injection.kill_at(1, "before_commit", "model_0000004") == "1:before_commit:model_0000004"
    with pytest.raises(ValueError, match="phase 'during' is not one of"):
        fault_injection.kill_at(1, "during", "model_0000004")
    monkeypatch.setenv(fault_injection.KILL_AT_ENV, "one:mid_weights:model_0000004")
    with pytest.raises(ValueError, match=r"LIBAI_EXT_KILL_AT='one:mid_weights:model_0000004': expected"):
        fault_injection.fault_point("mid_weights", "model_0000004")


def test_manifest_is_json_a_reader_can_open(two_checkpoints):
    with open(two_checkpoints / "model_0000009" / MANIFEST) as f:
        assert json.load(f)["format"] == "libai_ext-checkpoint/1"


def crash_between_the_renames_of(checkpointer, name, monkeypatch):
    """Save ``name`` again, the process dying between ``replace_folder``'s two renames."""
    renames = []
    real_rename = os.rename

    def rename(source, target):
        renames.append((source, target))
        if len(renames) == 2:
            raise KeyboardInterrupt("killed between the renames")
        real_rename(source, target)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(KeyboardInterrupt):
        checkpointer.save(name)
    monkeypatch.setattr(os, "rename", real_rename)


@pytest.mark.parametrize("name", ["model_best", "model_final"])
def test_a_commit_that_a_save_was_replacing_is_taken_back_from_retired(tmp_path, monkeypatch, caplog, name):
    first = checkpointer(tmp_path)
    first.save("model_0000004", iteration=4)
    first.save(name)
    (tmp_path / "last_checkpoint").write_text(name)  # LiBai 0.1.1 tags model_best too
    crash_between_the_renames_of(checkpointer(tmp_path), name, monkeypatch)
    assert not (tmp_path / name).exists()
    assert (tmp_path / f"{name}.retired").is_dir() and (tmp_path / staging_name(name)).is_dir()
    with caplog.at_level(logging.WARNING):
        choice = choose_resume_checkpoint(resume_config(tmp_path))
    # Without the rule the pointer named "no such folder", model_0000004 was resumed and the .retired copy deleted.
    assert choice.chosen == name and choice.restored == [name], choice
    assert f"{tmp_path}/{name} was being replaced when the run stopped" in caplog.text
    assert sorted(os.listdir(tmp_path)) == ["last_checkpoint", "model_0000004", name]
    loaded = trained_parts()[0]
    Checkpointer(loaded, str(tmp_path)).load(str(tmp_path / name), checkpointables=[])
    assert np.array_equal(loaded.weight.to_local().numpy(), first.model.weight.to_local().numpy())


def test_a_numbered_retired_folder_nothing_names_is_an_unfinished_deletion(two_checkpoints):
    os.rename(two_checkpoints / "model_0000004", two_checkpoints / "model_0000004.retired")  # retention stopped there
    choice = scan_for_resume(str(two_checkpoints), checksums=True)
    assert (choice.chosen, choice.restored, choice.leftovers) == ("model_0000009", [], ["model_0000004.retired"])


def test_a_damaged_retired_copy_is_not_taken_back(tmp_path, monkeypatch):
    saver = checkpointer(tmp_path)
    saver.save("model_0000004", iteration=4)
    saver.save("model_best")
    crash_between_the_renames_of(checkpointer(tmp_path), "model_best", monkeypatch)
    os.truncate(max(tensor_files(tmp_path / "model_best.retired"), key=os.path.getsize), 4)
    choice = scan_for_resume(str(tmp_path), checksums=True)
    assert (choice.chosen, choice.restored) == ("model_0000004", [])
    assert "model_best.retired" in choice.leftovers
