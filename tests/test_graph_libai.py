"""Graph mode as LiBai's own configs set it: ``graph.train_graph`` names ``libai.models.utils.GraphBase``.

LiBai main's ``configs/common/models/graph.py`` (imported by its GPT-2, BERT, T5 and ViT configs)
sets ``enabled=True`` with LiBai's ``GraphBase``.  With only the trainer line changed,
``ConsistentBatchTrainer`` builds that graph and gives it the step (``engine.graph.feed_step``), so
its dropout masks are eager training's; on LiBai 0.1.1 its ``GraphBase`` runs through
``compat.graph_proxy_v0_1``, and on CPU ranks the tied word embeddings cross the pipeline stages
through ``compat.cpu_graph_shared_params``.  ``tools/check_equivalence.py`` trains LiBai's models
(every dropout on) in eager mode on 1 rank and in graph mode, the configs in one launch per layout, and
compares the per-iteration raw losses: graph equals eager within 1e-5.

Quick tier: GPT-2 on pp2 for 2 iterations.  Long tier: GPT-2 and ViT on pp2, tp2 x pp2 and
dp2 x pp2 (each against eager 1 rank, so no graph run of 1 rank; dp x tp graphs are refused on CPU ranks: ``engine.graph.check_graph_options``) for 3
iterations (BERT's graph is GPT-2's case again: a text model whose word embeddings are tied across the
stages; its 20 iterations are in docs/benchmarks.md), and stock LiBai's graph on pp2, which aborts every rank (the tied embeddings, without
the repair; what stock's graph draws is in ``tests/test_graph.py``).  The 20-iteration table is in docs/benchmarks.md (Equivalence).
"""
import os

import pytest

from conftest import ROOT, load_tool, long_tier_selected, relative_differences, working_folder

RTOL = 1e-5
LIBAI_GRAPH = ["graph.train_graph._target_=libai.models.utils.GraphBase",
               "graph.eval_graph._target_=libai.models.utils.GraphBase"]
tool = load_tool("check_equivalence")


@pytest.fixture(scope="module", autouse=True)
def data_folder(tmp_path_factory):
    """The configs build their data under ./data on first use: one folder for every run here."""
    with working_folder(tmp_path_factory.getbasetemp() / "graph-libai-data") as folder:
        yield folder


def run_tool(work, layouts, iters, *overrides, configs=("libai_gpt2_cpu",)):
    """``(status, {config: {layout: max relative difference}}, output)``: eager on 1 rank vs ``layouts``."""
    argv = ["--config-file", *[os.path.join(ROOT, "configs", f"{name}.py") for name in configs],
            "--layouts", "1", *layouts, "--iters", str(iters), "--rtol", str(RTOL), "--timeout", "1200",
            "--workdir", str(work / "runs"), *LIBAI_GRAPH, *overrides]
    return relative_differences(argv, configs, layouts)


def test_libai_graph_base_equals_eager_on_pp2(request, tmp_path):
    """GPT-2: LiBai's GraphBase, dropout in the graph, and the word embeddings tied across the stages (where the
    long tier runs too, read from its layouts, which hold this one)."""
    if long_tier_selected(request):
        status, tables, text = request.getfixturevalue("layouts")
    else:
        status, tables, text = run_tool(tmp_path, ["pp2:graph"], 2, configs=["libai_gpt2_cpu"])
    assert status == tool.EXIT_MATCH and tables["libai_gpt2_cpu"]["pp2:graph"] <= RTOL, text


LONG_LAYOUTS = ["pp2:graph", "tp2xpp2:graph", "dp2xpp2:graph"]
LONG_CONFIGS = ["libai_gpt2_cpu", "libai_vit_digits_cpu"]


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    return run_tool(tmp_path_factory.mktemp("graph-libai-all"), LONG_LAYOUTS, 3, configs=LONG_CONFIGS)


@pytest.mark.long
@pytest.mark.parametrize("config", LONG_CONFIGS)
@pytest.mark.parametrize("layout", LONG_LAYOUTS)
def test_libai_graph_base_equals_eager_on_every_layout(layouts, config, layout):
    assert layouts[1][config][layout] <= RTOL, layouts[2]


@pytest.mark.long
def test_stock_libai_graph_aborts_on_pp2_where_the_embeddings_are_tied(tmp_path):
    """Stock LiBai, its GraphBase and OneFlow's dropout (fusions off: no CPU kernel): GPT-2's word embeddings,
    read on the last stage, abort OneFlow's CPU transport (docs/upstream-bugs.md section 20)."""
    work = tmp_path / "runs"
    # pp2:graph first: the tool stops at the first layout that fails, so no 1-rank reference is started for nothing.
    argv = ["--config-file", os.path.join(ROOT, "configs", "libai_gpt2_cpu.py"), "--layouts", "pp2:graph", "1",
            "--iters", "2", "--timeout", "1200", "--workdir", str(work), *LIBAI_GRAPH,
            "train.trainer=libai.engine.DefaultTrainer", "model.cfg.bias_dropout_fusion=False",
            "model.cfg.scale_mask_softmax_fusion=False"]
    assert tool.main(argv) == tool.EXIT_RUN_FAILED
    logs = [open(os.path.join(work, "pp2:graph-logs", name), errors="replace").read()
            for name in sorted(os.listdir(work / "pp2:graph-logs")) if name.startswith("rank")]
    assert any("separated_header_mem_ptr() == nullptr" in log for log in logs), "stock failed another way"
