"""Stage-0-only loading: the same batches bit for bit, and no data work outside stage 0."""
import pytest

from conftest import rank_script
from libai_ext.testing import launch


@pytest.mark.parametrize("layout", [(1, 1, 2), (2, 2, 2)], ids=["pp2", "dp2-tp2-pp2"])
def test_stage0_only_batches_are_bit_identical(tmp_path, layout):
    dp, tp, pp = layout
    nproc = dp * tp * pp
    result = launch(rank_script("stage0_loading.py"), nproc,
                    ["--dp", dp, "--tp", tp, "--pp", pp, "--data", tmp_path / "digits"], timeout=300)
    default, stage0_only = result.records(0)
    assert not default["stage0_only"] and stage0_only["stage0_only"]
    assert len(default["digests"]) == 3
    assert stage0_only["digests"] == default["digests"]
    stage0 = range(nproc // pp)
    for rank in range(nproc):
        default, stage0_only = result.records(rank)
        assert default["served"] == 3 * 8  # the default path reads on every rank
        if rank in stage0:
            assert stage0_only["served"] == 3 * 8
        else:
            assert stage0_only["served"] == 0 and stage0_only["loader"] == "Stage0OnlyLoader"
