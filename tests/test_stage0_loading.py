"""Stage-0-only loading: the same batches bit for bit, and no data work outside stage 0.

Each layout runs in the launch that tests/test_pairing.py reads too (conftest ``loader_launch``:
rank_scripts/pairing.py ``--stage0-loading``, which runs rank_scripts/stage0_loading.py after the pairing cases).
"""
import pytest

from conftest import records_of_every_rank


# (2, 2, 2) on 8 ranks in the long tier; pp2 holds the guarantee in the quick tier.
@pytest.mark.parametrize("layout", [(1, 1, 2), pytest.param((2, 2, 2), marks=pytest.mark.long)],
                         ids=["pp2", "dp2-tp2-pp2"])
def test_stage0_only_batches_are_bit_identical(loader_launch, layout):
    dp, tp, pp = layout
    nproc = dp * tp * pp
    result = loader_launch(layout)
    by_rank = records_of_every_rank(result, count=2, check="stage0_loading")  # default path, then stage-0-only
    assert len(by_rank) == nproc
    stage0 = range(nproc // pp)
    reference = by_rank[0][0]["digests"]
    assert len(reference) == 3 and all(len(step) == 2 for step in reference)  # 3 steps x (images, labels)
    for rank, (default, stage0_only) in by_rank.items():
        assert not default["stage0_only"] and stage0_only["stage0_only"]
        assert default["served"] == 3 * 8  # the default path reads on every rank
        if rank in stage0:
            assert default["digests"] == stage0_only["digests"] == reference, f"rank {rank}"
            assert stage0_only["served"] == 3 * 8
        else:
            assert default["digests"] == stage0_only["digests"] == []
            assert stage0_only["served"] == 0 and stage0_only["loader"] == "Stage0OnlyLoader"
