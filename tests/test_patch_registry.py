"""The patch registry: every change libai_ext makes to OneFlow, LiBai and flowvision is named by it and undone by it.

The footprint runs (``rank_scripts/patch_footprint.py``) snapshot every attribute of every loaded
``oneflow.*``, ``libai.*`` and ``flowvision.*`` module and class, train (or check batches) for a few
steps on 1 rank, snapshot again, and compare what changed with ``libai_ext.applied_patches()``.
"""
import json
import os
import subprocess
import sys
import types

import pytest

from libai_ext.compat import libai_line, libai_main, patching
from libai_ext.testing import launch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "rank_scripts"))
import patch_footprint  # noqa: E402

LIBAI_MAIN = libai_line() is libai_main
SHORT_RUN = ["train.train_iter=3", "train.evaluation.enabled=False", "train.dist.pipeline_parallel_size=1",
             "train.log_period=1", "train.train_micro_batch_size=8"]
# case -> (tool, extra overrides); the eager run is the quick tier's, the others the long tier's
FOOTPRINT_CASES = {
    "eager": ("train_net", []),
    "graph": ("train_net", ["graph.enabled=True"]),
    "check_batch": ("check_batch", []),
}


@pytest.fixture
def empty_registry(monkeypatch):
    monkeypatch.setattr(patching, "_applied", [])
    return patching


def _owner_module(name="libai_ext_patch_target"):
    module = types.ModuleType(name)
    module.function = lambda: "original"
    return module


# --- the registry itself ----------------------------------------------------------------------------

def test_replace_undo_and_restoring_put_back_what_was_there(empty_registry):
    module = _owner_module()

    class Owner:
        kept = "original"

    with patching.restoring():
        assert patching.replace(module, "function", lambda: "new", "test", patch="compile_step")
        assert not patching.replace(module, "function", lambda: "newer", "test", patch="compile_step")  # once
        assert patching.replace(Owner, "added", "new attribute", "test", patch="graph_proxy_v0_1")
        assert module.function() == "new" and Owner.added == "new attribute"
        rows = {row["target"]: row for row in patching.applied_patches()}
        assert set(rows) == {"libai_ext_patch_target.function", f"{Owner.__module__}.{Owner.__qualname__}.added"}
        assert rows["libai_ext_patch_target.function"]["why"] == patching.DECLARED["compile_step"].why
        assert {"target", "why", "disable", "line", "device", "test", "names"} <= set(rows["libai_ext_patch_target"
                                                                                             ".function"])
    assert module.function() == "original" and not hasattr(Owner, "added") and patching.applied() == {}


def test_a_temporary_change_over_a_lasting_one_leaves_the_lasting_one(empty_registry):
    module = _owner_module()
    patching.replace(module, "function", lambda: "lasting", "test", patch="random_op_routing")
    with patching.temporarily([(module, "function", lambda: "temporary")], "init_recording"):
        assert module.function() == "temporary"
        assert [row["patch"] for row in patching.applied_patches()] == ["random_op_routing", "init_recording"]
    assert module.function() == "lasting"
    patching.undo_patch("random_op_routing")
    assert module.function() == "original"


def test_undoing_the_lower_of_two_changes_keeps_the_upper_until_it_ends(empty_registry):
    module = _owner_module()
    patching.replace(module, "function", lambda: "lasting", "test", patch="random_op_routing")
    with patching.temporarily([(module, "function", lambda: "temporary")], "init_recording"):
        patching.undo_patch("random_op_routing")
        assert module.function() == "temporary"
    assert module.function() == "original"


def test_process_changes_are_listed_and_undone(empty_registry):
    undone = []
    patching.process_change("fork_hook", "os.register_at_fork(after_in_child)", lambda: undone.append(1))
    assert [row["target"] for row in patching.applied_patches()] == ["os.register_at_fork(after_in_child)"]
    patching.restore_all()
    assert undone == [1] and patching.applied_patches() == []


def test_an_undeclared_replace_is_named_with_its_reason(empty_registry):
    """The ``replace(owner, name, replacement, reason)`` call of a repair that names no declared patch."""
    module = _owner_module()
    with patching.restoring():
        patching.replace(module, "function", lambda: "new", "the reason given")
        (row,) = patching.applied_patches()
        assert row["why"] == "the reason given" and row["disable"] == "none declared"


def test_an_undeclared_patch_key_is_refused(empty_registry):
    with pytest.raises(KeyError, match="not declared"):
        patching.replace(_owner_module(), "function", None, "test", patch="no_such_patch")


def test_every_name_of_a_changed_attribute_is_listed(empty_registry):
    """An op of ``oneflow._C`` under every name the module is loaded as (``oneflow._oneflow_internal._C`` once
    imported by that name); a class through every module that imported it."""
    import oneflow as flow

    with patching.restoring():
        patching.replace(flow._C, "rand", flow._C.rand, "test", patch="random_op_routing")
        patching.replace(flow.Tensor, "bernoulli", flow.Tensor.bernoulli, "test", patch="random_op_routing")
        names = {name for row in patching.applied_patches() for name in row["names"]}
    module_names = [name for name, module in sys.modules.items() if module is flow._C]
    assert len(module_names) >= 1 and {f"{name}.rand" for name in module_names} <= names
    assert {"oneflow.Tensor.bernoulli", "oneflow.framework.tensor.Tensor.bernoulli"} <= names


def test_a_train_graphs_class_is_a_named_change_that_ends_with_the_graph(empty_registry):
    """``feed_step`` changes the class of a graph object: named, undone by the registry, forgotten with the graph."""
    import gc

    import oneflow as flow

    from libai_ext.engine.graph import StepFedGraph, feed_step

    class Graph(flow.nn.Graph):
        def build(self, x):
            return x

    graph = feed_step(Graph())
    (row,) = patching.applied_patches()
    assert isinstance(graph, StepFedGraph) and row["patch"] == "step_fed_graph" and ".__class__" in row["target"]
    patching.undo_patch("step_fed_graph")
    assert type(graph) is Graph and patching.applied() == {}
    feed_step(graph)
    del graph
    gc.collect()
    assert patching.applied() == {}


def test_samplers_see_the_placements_rank_only_while_loaders_build(empty_registry):
    import libai.utils.distributed as dist

    from libai_ext.compat.layout import placement_data_parallel_rank
    from libai_ext.engine.trainer import samplers_follow_placement

    original = dist.get_data_parallel_rank
    with samplers_follow_placement():
        assert dist.get_data_parallel_rank is placement_data_parallel_rank
        assert [row["patch"] for row in patching.applied_patches()] == ["sampler_placement_rank"]
    assert dist.get_data_parallel_rank is original and patching.applied() == {}


def test_the_snapshot_sees_a_change_made_around_the_registry():
    """What makes the footprint runs able to fail: a change that bypasses the registry is found, and unnamed."""
    import libai.utils.distributed as dist

    before = patch_footprint.snapshot()
    original = dist.synchronize  # no patch of libai_ext touches it
    dist.synchronize = lambda: None
    try:
        changed = patch_footprint.differences(before, patch_footprint.snapshot())
    finally:
        dist.synchronize = original
    assert "libai.utils.distributed.synchronize" in changed
    assert "libai.utils.distributed.synchronize" not in {n for row in patching.applied_patches() for n in row["names"]}


def test_importing_libai_ext_changes_nothing():
    code = ("import sys, libai_ext, libai_ext.compat, libai_ext.compat.patching as p\n"
            "assert p.applied_patches() == [], p.applied_patches()\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('oneflow', 'libai', 'flowvision')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_architecture_page_holds_the_registry_table(repo_root):
    page = open(os.path.join(repo_root, "docs", "architecture.md")).read()
    assert patching.table_markdown() in page, "docs/architecture.md: paste libai_ext.compat.patching.table_markdown()"


def test_every_declared_patch_names_an_existing_test_file(repo_root):
    for patch in patching.PATCHES:
        for path in patch.test.split(", "):
            assert os.path.isfile(os.path.join(repo_root, path)), f"{patch.key}: {path}"


# --- a real run ---------------------------------------------------------------------------------------

def _footprint(repo_root, tmp_path, case):
    tool, overrides = FOOTPRINT_CASES[case]
    out = tmp_path / f"{case}.json"
    args = [str(out), "--tool", tool, "--", "--config-file", os.path.join(repo_root, "configs", "demo_pipeline_cpu.py"),
            f"dataloader.train.dataset.0.root.root={tmp_path}/data", f"train.output_dir={tmp_path}/{case}",
            *SHORT_RUN, *overrides]
    launch(os.path.join(repo_root, "tests", "rank_scripts", "patch_footprint.py"), 1, args, timeout=400,
           workdir=str(tmp_path / f"{case}-logs"))
    assert out.exists(), f"{case}: the rank wrote no footprint"
    return json.loads(out.read_text())


def _check_footprint(found, case):
    assert found["code"] == 0, case
    assert found["unnamed"] == [], f"{case}: changed and named by no patch: {found['unnamed']}"
    assert found["left_after_restore"] == [], f"{case}: not put back: {found['left_after_restore']}"
    assert found["in_force_after_restore"] == 0
    if case == "check_batch":
        assert "cuda_placements" in found["patches"]
    else:  # the routed ops under both names of oneflow._C, and the patches a training makes
        assert {"oneflow._C.dropout", "oneflow._oneflow_internal._C.dropout", "oneflow.Tensor.bernoulli"} <= set(
            found["changed"]), case
        assert {"random_op_routing", "cuda_placements", "fork_hook"} <= set(found["patches"]), case
    assert ("graph_proxy_v0_1" in found["patches"]) == (not LIBAI_MAIN)


def test_a_training_run_changes_only_what_the_registry_names(repo_root, tmp_path):
    _check_footprint(_footprint(repo_root, tmp_path, "eager"), "eager")


@pytest.mark.long
@pytest.mark.parametrize("case", ["graph", "check_batch"])
def test_graph_training_and_check_batch_change_only_what_the_registry_names(repo_root, tmp_path, case):
    _check_footprint(_footprint(repo_root, tmp_path, case), case)


def test_list_patches_prints_the_table_without_training(repo_root, tmp_path):
    output = tmp_path / "never"
    out = subprocess.run([sys.executable, os.path.join(repo_root, "tools", "train_net.py"), "--list-patches",
                          "--config-file", os.path.join(repo_root, "configs", "demo_pipeline_cpu.py"),
                          f"train.output_dir={output}"], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)), start_new_session=True)
    assert out.returncode == 0, out.stderr[-3000:]
    for key in ("cuda_placements", "cpu_layer_norm", "random_op_routing", "preemption_signals"):
        assert f"\n{key}: " in out.stdout, key
    assert ("graph_proxy_v0_1: " in out.stdout) == (not LIBAI_MAIN)
    assert "train.preemption.enabled=false" in out.stdout and not output.exists()
