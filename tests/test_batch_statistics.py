"""BatchNorm over the global batch (``libai_ext.compat.batch_statistics``).

On a batch split over data-parallel ranks, OneFlow 0.9.0's batch normalisation takes each shard's own mean and
variance: under ``"fast"`` (OneFlow's kernel as it is) the outputs, gradients and running statistics differ from 1
rank's, and under ``"layout_invariant"`` they equal 1 rank's.  Every module that normalises over the batch is
checked: ``BatchNorm1d`` (2-d and 3-d inputs), ``BatchNorm2d``, ``BatchNorm3d``, ``FusedBatchNorm2d``, a subclass of
the user's and ``nn.functional.batch_norm``, each for two training steps and one eval step, and ``BatchNorm2d``
in ``nn.Graph``
(tests/rank_scripts/batch_statistics.py; the batches are synthetic, normal values).  dp2 in the quick tier,
dp2 x tp2 (a 2-d placement) in the long tier.
"""
import pytest

from conftest import rank_script, records_of_every_rank
from libai_ext.testing import launch

CASES = ["BatchNorm1d", "BatchNorm1d-3d-input", "BatchNorm2d", "BatchNorm3d", "FusedBatchNorm2d",
         "subclass-BatchNorm2d", "functional-batch_norm"]
RTOL = 1e-5


def test_every_normalising_op_of_oneflow_is_routed_or_known_per_sample():
    """A new OneFlow op whose name says it normalises must be classified before it is trusted."""
    import oneflow as flow

    from libai_ext.compat import batch_statistics as bs

    known = set(bs.BATCH_STATISTICS + bs.PER_SAMPLE + bs.LOCAL_ONLY + bs.NOT_NORMALISATION)
    found = {name for name in dir(flow._C) if "norm" in name.lower()}
    assert found - known == set(), f"unclassified: {sorted(found - known)}"
    assert set(bs.BATCH_STATISTICS) <= found


@pytest.mark.parametrize("layout", ["dp2", pytest.param("dp2xtp2", marks=pytest.mark.long)])
def test_batch_statistics_over_the_global_batch(layout, tmp_path):
    dp, tp = {"dp2": (2, 1), "dp2xtp2": (2, 2)}[layout]
    result = launch(rank_script("batch_statistics.py"), dp * tp, ["--dp", dp, "--tp", tp], timeout=300,
                    workdir=str(tmp_path))
    for rank, records in records_of_every_rank(result, count=2 * len(CASES) + 2).items():
        seen = {(r["case"], r["mode"]): r["differences"] for r in records}
        graph = {mode: seen.pop(("graph-BatchNorm2d", mode)) for mode in ("fast", "layout_invariant")}
        assert sorted(seen) == sorted((case, mode) for case in CASES for mode in ("fast", "layout_invariant"))
        # in a graph too, where an in-place update of a buffer is lost: the running statistics hold
        assert len(graph["layout_invariant"]) == 3 and max(graph["layout_invariant"].values()) <= RTOL, (rank, graph)
        assert graph["fast"]["out0"] > 1e-2 and graph["fast"]["running_mean"] > 1e-2, (rank, graph)
        for case in CASES:
            invariant, fast = seen[case, "layout_invariant"], seen[case, "fast"]
            assert len(invariant) == 9, invariant  # 3 outputs, 2 input and 2 weight gradients, 2 running stats
            assert max(invariant.values()) <= RTOL, (rank, case, invariant)
            # OneFlow's kernel: each shard's statistics (training outputs and running statistics differ)
            assert fast["out0"] > 1e-2 and fast["running_mean"] > 1e-2, (rank, case, fast)
