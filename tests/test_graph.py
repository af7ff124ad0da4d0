"""Static-graph training (graph.enabled=True) with libai_ext's GraphBase on OneFlow 0.9.0 CPU ranks.

Each multi-rank job runs once per module and is shared by the tests that read it.
"""
import json
import os

import numpy as np
import pytest

from conftest import assert_refused_without_hang, rank_script, records_of_every_rank
from libai_ext.compat import libai_line, libai_main
from libai_ext.testing import launch, ranks_device

LIBAI_MAIN = libai_line() is libai_main

DEMO = "configs/demo_pipeline_cpu.py"
LAUNCH_TIMEOUT = 600  # generous: other test runs may share the two cores
# Refusals of what OneFlow 0.9.0 cannot do on CPU ranks: on CUDA ranks those options are allowed.
cpu_only = pytest.mark.skipif(ranks_device() == "cuda", reason=(
    "expects a refusal that holds only on CPU ranks (OneFlow 0.9.0's CPU transport and CPU graph AMP); "
    "these ranks run on CUDA (LIBAI_EXT_TEST_DEVICE=cuda)"))


# --- a. pairing through a train graph step -------------------------------------------------

PAIRING_LAYOUTS = [pytest.param((1, 1, 2), marks=pytest.mark.long), (2, 1, 2)]  # (dp, tp, pp); dp x tp graphs are refused on CPU (see below)


@pytest.fixture(scope="module", params=PAIRING_LAYOUTS, ids=lambda l: "dp%d-tp%d-pp%d" % l)
def graph_pairing(request, tmp_path_factory):
    dp, tp, pp = request.param
    result = launch(rank_script("graph_pairing.py"), dp * tp * pp, ["--dp", dp, "--tp", tp, "--pp", pp],
                    timeout=LAUNCH_TIMEOUT, workdir=str(tmp_path_factory.mktemp("graph-pairing")))
    (records,) = records_of_every_rank(result, [0], count=4).values()  # (stock, fixed) x (plain, mixup)
    return request.param, {(r["trainer"], r["mixup"]): r for r in records}


@pytest.mark.parametrize("mixup", [False, True], ids=["plain", "mixup"])
def test_consistent_batch_trainer_pairs_hold_in_a_train_graph(graph_pairing, mixup):
    _, records = graph_pairing
    record = records[("fixed", mixup)]
    assert record["rows"] > 0
    assert record["mismatch"] == 0, f"{record['mismatch']} of {record['rows']} rows unpaired"


@pytest.mark.parametrize("mixup", [False, True], ids=["plain", "mixup"])
def test_stock_get_batch_breaks_pairs_where_real_libai_does(graph_pairing, mixup):
    """Batches as LiBai's samplers give them (rank_scripts/graph_pairing.py): stock 0.1.1 breaks pairs
    with mixup, and under dp x pp without it; at dp=1 without mixup every rank reads the same samples.
    LiBai main keeps them everywhere (every field from stage 0, LiBai #255; its samplers read the
    placement's shard)."""
    (dp, _, pp), records = graph_pairing
    record = records[("stock", mixup)]
    if not LIBAI_MAIN and (mixup or (dp > 1 and pp > 1)):
        assert record["mismatch"] > 0, "stock LiBai kept the pairs: the test cannot see the bug"
    else:
        assert record["mismatch"] == 0, "stock LiBai broke pairs that real LiBai keeps: not LiBai's batches"


def test_pairing_model_modules_get_their_stages(graph_pairing):
    assert graph_pairing[1][("fixed", False)]["modules"] == {"read": {"stage": 0}, "check": {"stage": 1}}


# --- b, d. graph vs eager on the demo model, pp2 ---------------------------------------------

PARITY_MODES = ["eager", "graph", "graph_ckpt", "eager_acc2", "graph_acc2"]
# README: "graph and eager losses agree within 2.1e-6 over the first 10 iterations on pp2"
# (measured with benchmarks/graph_parity.py); the tests hold the modes to that claim.
GRAPH_EAGER_ATOL = 5e-6


@pytest.fixture(scope="module")
def parity(tmp_path_factory):
    """Raw per-iteration losses of the demo model in every mode of rank_scripts/graph_parity.py."""
    work = tmp_path_factory.mktemp("graph-parity")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    args = ["--config", os.path.join(root, DEMO), "--data", work / "data", "--output", work / "out",
            "--iters", 10, "--modes", ",".join(PARITY_MODES)]
    result = launch(rank_script("graph_parity.py"), 2, args, timeout=LAUNCH_TIMEOUT, workdir=str(work / "logs"))
    (records,) = records_of_every_rank(result, [0], count=len(PARITY_MODES)).values()
    assert [r["mode"] for r in records] == PARITY_MODES
    return {r["mode"]: r for r in records}


@pytest.mark.long
def test_same_seed_gives_the_same_initial_weights_in_every_mode(parity):
    weights = {mode: tuple(r["initial_weights"]) for mode, r in parity.items()}
    assert len(set(weights.values())) == 1, weights


@pytest.mark.long
def test_graph_and_eager_losses_agree_for_10_iterations(parity):
    """Same seed and weights, no random crop, no mixup, no dropout (rank_scripts/graph_parity.py)."""
    eager, graph = np.array(parity["eager"]["losses"]), np.array(parity["graph"]["losses"])
    assert len(eager) == len(graph) == 10
    assert np.ptp(eager) > 1e-2, "the loss did not move: the comparison would prove nothing"
    assert np.abs(graph - eager).max() < GRAPH_EAGER_ATOL, np.abs(graph - eager)


@pytest.mark.long
def test_demo_mixer_stages_follow_layer_idx(parity):
    expected = {"embed": 0, "blocks.0": 0, "blocks.1": 0, "blocks.2": 1, "blocks.3": 1, "norm": 1, "head": 1}
    modules = parity["graph"]["modules"]
    assert {name: entry["stage"] for name, entry in modules.items()} == expected


@pytest.mark.long
def test_activation_checkpointing_recomputes_blocks_and_keeps_the_losses(parity):
    plain, ckpt = parity["graph"], parity["graph_ckpt"]
    checkpointed = sorted(n for n, entry in ckpt["modules"].items() if entry.get("checkpointing"))
    assert checkpointed == ["blocks.0", "blocks.1", "blocks.2", "blocks.3", "norm"]
    assert ckpt["compiled_ops"] > plain["compiled_ops"], "no recomputed ops in the compiled job"
    assert len(ckpt["losses"]) == len(plain["losses"]) == 10
    assert np.abs(np.array(ckpt["losses"]) - plain["losses"]).max() < 1e-6


@pytest.mark.long
def test_graph_gradient_accumulation_matches_eager_micro_batches(parity):
    """num_accumulation_steps=2: one graph step = mean loss of two eager micro-batches (constant LR)."""
    eager = np.array(parity["eager_acc2"]["losses"]).reshape(-1, 2).mean(axis=1)
    graph = np.array(parity["graph_acc2"]["losses"])
    assert len(graph) == 5 and len(eager) == 5
    assert np.abs(graph - eager).max() < GRAPH_EAGER_ATOL, np.abs(graph - eager)


# --- e. dropout and drop-path in a train graph: a new mask every step, the eager one --------

MASK_MODES = ["eager", "graph_resumed", "libai_graph", "user_graph", "stock_eager", "stock_graph",
              "user_graph_traces", "unkeyed", "keyed_ops"]


@pytest.fixture(scope="module")
def graph_masks(tmp_path_factory):
    """Outputs of 4 steps per mode (rank_scripts/graph_masks.py), pp2, gradient accumulation 2."""
    result = launch(rank_script("graph_masks.py"), 2, ["--pp", 2, "--accs", 2], timeout=LAUNCH_TIMEOUT,
                    workdir=str(tmp_path_factory.mktemp("graph-masks")))
    by_rank = records_of_every_rank(result, count=len(MASK_MODES))
    modes = {rank: {r["mode"]: r["outputs"] for r in records} for rank, records in by_rank.items()}
    for rank, recorded in modes.items():
        assert sorted(recorded) == sorted(MASK_MODES), f"rank {rank}: {sorted(recorded)}"
    return modes


def distinct_steps(outputs):
    return len({np.array(step).tobytes() for step in outputs})


def assert_eager_masks(graph_masks, mode):
    checked = 0
    for rank, modes in graph_masks.items():
        assert len(modes[mode]) == len(modes["eager"]) == 4
        assert distinct_steps(modes["eager"]) == 4, f"rank {rank}: eager steps repeat"
        for step, (graph, eager) in enumerate(zip(modes[mode], modes["eager"])):
            assert graph == eager, f"rank {rank}, {mode}, step {step}: not the eager masks"
            checked += 1
    assert checked == 8


def test_graph_steps_draw_the_eager_masks_and_resume_exactly(graph_masks):
    """Each GraphBase step (two micro-batches, masks on both stages) equals the eager step exactly:
    steps 0-1 from the start, steps 2-3 after a state dict round trip into a fresh model and graph; the
    element-wise dropouts there computed by the keyed-dropout op where it is built (``setup.py``)."""
    assert_eager_masks(graph_masks, "graph_resumed")
    from libai_ext.random import keyed_op
    for rank, modes in graph_masks.items():
        # three Dropout calls a step, forward and backward; DropPath's per-sample masks take the int32 ops
        assert modes["keyed_ops"] == ([6, 6] if keyed_op.load() else [0, 0]), (rank, keyed_op.status())


@pytest.mark.parametrize("mode", ["libai_graph", "user_graph"])
def test_libai_graph_base_and_a_user_subclass_draw_the_eager_masks(graph_masks, mode):
    """LiBai's own GraphBase (as LiBai's graph configs name it) and a user's subclass of it with a
    build of its own, given the step by feed_step as ConsistentBatchTrainer does."""
    assert_eager_masks(graph_masks, mode)
    if mode == "user_graph":
        assert all(modes["user_graph_traces"] == 1 for modes in graph_masks.values()), "the user's build did not run"


def test_stock_libai_graph_draws_a_new_mask_every_step_but_not_eagers(graph_masks):
    """What stock LiBai's graph does with OneFlow's nn.Dropout: new masks each step, other than eager's."""
    for rank, modes in graph_masks.items():
        assert len(modes["stock_graph"]) == len(modes["stock_eager"]) == 4
        assert distinct_steps(modes["stock_graph"]) == 4, f"rank {rank}: stock's graph repeated a mask"
        assert modes["stock_graph"] != modes["stock_eager"], f"rank {rank}: stock's graph drew eager's masks"


def test_a_graph_that_gives_no_step_fails_naming_the_layer(graph_masks):
    """A frozen mask is impossible: tracing libai_ext's layers in a bare nn.Graph is refused by name."""
    for rank, modes in graph_masks.items():
        message = modes["unkeyed"]
        assert message is not None, f"rank {rank}: a bare nn.Graph traced libai_ext's Dropout without error"
        assert "Dropout 'drop0'" in message and "libai_ext.feed_step(graph)" in message, message


# --- c. tools/train_net.py in graph mode, and the refusals ----------------------------------

TINY = ["train.train_iter=6", "train.log_period=2", "train.evaluation.eval_period=6",
        "train.test_micro_batch_size=90", "train.evaluation.eval_iter=2", "graph.enabled=True"]


def train_net(repo_root, tmp_path, nproc, *overrides, check=True):
    output, data = tmp_path / "out", tmp_path / "data"
    args = ["--config-file", os.path.join(repo_root, DEMO), *TINY, f"train.output_dir={output}",
            f"dataloader.train.dataset.0.root.root={data}", f"dataloader.test.0.dataset.root.root={data}",
            *overrides]
    result = launch(os.path.join(repo_root, "tools", "train_net.py"), nproc, args, timeout=LAUNCH_TIMEOUT,
                    check=check, stop_on_failure=check, workdir=str(tmp_path / "logs"))
    return output, result


def test_train_net_graph_mode_trains_and_evaluates_pp2(repo_root, tmp_path):
    """The demo as is (random crop, mixup) with ConsistentBatchTrainer and graph.enabled=True."""
    output, _ = train_net(repo_root, tmp_path, 2)
    info = json.loads((output / "run_info.json").read_text())
    assert info["trainer"].endswith("ConsistentBatchTrainer")
    assert "Acc@1" in info["final_eval"]
    metrics = [json.loads(line) for line in (output / "metrics.json").read_text().splitlines()]
    assert max(m["iteration"] for m in metrics) == (5 if LIBAI_MAIN else 6)  # main's metrics.json counts from 0
    losses = [m["total_loss"] for m in metrics if "total_loss" in m]
    assert len(losses) == 3, metrics  # log_period=2 over 6 iterations
    assert np.isfinite(losses).all()


@cpu_only
def test_amp_is_refused_on_cpu_ranks(repo_root, tmp_path):
    _, result = train_net(repo_root, tmp_path, 2, "train.amp.enabled=True", check=False)
    assert_refused_without_hang(result, "train.amp.enabled=True does nothing on CPU ranks")


@cpu_only
@pytest.mark.long
def test_data_x_tensor_parallel_graph_is_refused_on_8_cpu_ranks(repo_root, tmp_path):
    """(2,2,2) graph training aborts OneFlow 0.9.0's CPU transport; every rank must refuse it instead."""
    _, result = train_net(repo_root, tmp_path, 8, "train.dist.data_parallel_size=2",
                          "train.dist.tensor_parallel_size=2", check=False)
    assert_refused_without_hang(result, "train.dist.data_parallel_size=2 and train.dist.tensor_parallel_size=2")


@cpu_only
def test_a_sliced_column_parallel_bias_is_refused_before_the_first_step(tmp_path):
    """tp2: a column-parallel output with a bias, sliced along its split axis (ChatGLM's ``query_key_value``), aborts
    every rank of OneFlow 0.9.0 at the first step of a CPU train graph (tools/repro/graph_column_bias_cpu.py, stock
    on both LiBai lines); the plugin's train graphs refuse it on every rank, naming the module and the config keys.
    Without its bias the layer trains (what LiBai's zoo, Llama, MAE and SimCSE do on tp2 graphs: no refusal there,
    tests/test_graph_libai.py and tests/test_libai_projects.py)."""
    result = launch(rank_script("graph_split_bias.py"), 2, ["--tp", "2"], timeout=LAUNCH_TIMEOUT,
                    workdir=str(tmp_path / "logs"))
    for rank, records in records_of_every_rank(result, count=2).items():
        refused, trained = records
        assert refused["bias"] and refused["outcome"] == "refused", (rank, refused)
        for words in ("query_key_value", "graph.enabled=False", "train.dist.tensor_parallel_size=2", "section 38"):
            assert words in refused["message"], (rank, words, refused["message"])
        assert not trained["bias"] and trained["outcome"] == "trained", (rank, trained)


def test_check_graph_options():
    from libai_ext.engine.graph import GraphConfigError, check_graph_options

    check_graph_options(grad_acc_steps=4, data_parallel_size=2, cuda=False)  # dp x pp: fine
    check_graph_options(fp16=True, zero_optim=True, data_parallel_size=2, tensor_parallel_size=2, cuda=True)
    refusals = {
        "train.amp.enabled": dict(fp16=True),
        "train.zero_optimization.enabled": dict(zero_optim=True),
        "train.dist.tensor_parallel_size=2": dict(data_parallel_size=2, tensor_parallel_size=2),
    }
    for key, options in refusals.items():
        with pytest.raises(GraphConfigError, match=key):
            check_graph_options(cuda=False, **options)
    with pytest.raises(GraphConfigError, match="train.num_accumulation_steps"):
        check_graph_options(grad_acc_steps=0, cuda=True)


@pytest.mark.parametrize("grad_acc_steps, cuda, warned", [(2, False, True), (2, True, False), (1, False, False)])
def test_cpu_gradient_accumulation_in_a_graph_is_warned_of(caplog, grad_acc_steps, cuda, warned):
    """OneFlow 0.9.0's CPU train graphs with gradient accumulation now and then compute a wrong gradient
    (``tools/repro/graph_accumulation_grad.py`` shows it with OneFlow alone)."""
    from libai_ext.engine.graph import warn_of_cpu_gradient_accumulation

    with caplog.at_level("WARNING", logger="libai_ext.engine.graph"):
        warn_of_cpu_gradient_accumulation(grad_acc_steps, cuda)
    text = caplog.text
    assert ("train.num_accumulation_steps=2 on CPU ranks" in text and "upstream-bugs.md §32" in text) == warned, text


def test_libai_main_graph_arguments():
    """LiBai main's build_graph passes global_mode and auto_parallel_conf (None when the config lacks them)."""
    import oneflow as flow

    from libai_ext.engine.graph import _enabled, global_view_options

    assert global_view_options(None) is None and not _enabled(None)
    assert global_view_options({"enabled": False}) is None
    options = global_view_options({"enabled": True}, device="cpu")
    assert options["placement"].type == "cpu" and options["sbp"] == flow.sbp.split(0)
    assert _enabled({"enabled": True, "trunk_algo": True})
