"""The train data position checkpoints save (``DataPosition``), and elastic resume from it, in process.

The loader reads a synthetic dataset whose sample ``i`` is ``i``: the batches say which samples were
read.  An epoch of 100 samples; a "run" is a loader read for some batches, its position saved with
``state_dict`` (as a checkpoint writer does) and loaded into a new loader, maybe with another global
batch, as ``resume_or_load`` does.  Multi-rank, under the trainer: test_data_resume.py.
"""
import pytest
from libai.data.structures import Instance
from oneflow.utils.data import Dataset

from libai_ext.data import GlobalOrderBatchSampler, KeyedAugmentation
from libai_ext.data.ordered_loader import GlobalOrderLoader, batch_position
from libai_ext.data.position import DataPosition, GlobalBatchGuard
from libai_ext.random import epoch_order

SIZE, SEED = 100, 3


class Numbers(Dataset):
    def __len__(self):
        return SIZE

    def __getitem__(self, index):
        return int(index)


def loader(micro, dp=1, acc=1, consumed=0, rank=0, workers=0, seed=SEED, size=SIZE):
    dataset = Numbers() if size == SIZE else range(size)
    sampler = GlobalOrderBatchSampler(dataset, micro, consumed_samples=consumed, data_parallel_rank=rank,
                                      data_parallel_size=dp, seed=seed, num_accumulation_steps=acc)
    built = GlobalOrderLoader(KeyedAugmentation(dataset, seed), sampler, num_workers=workers)
    built.data_position = DataPosition(built)
    return built


def read(built, count):
    iterator = iter(built)
    return [next(iterator) for _ in range(count)]


def order(epoch, start, stop):
    return epoch_order(SEED, epoch, SIZE)(list(range(start, stop))).tolist()


def flat(batches):
    return [i for batch in batches for i in batch]


def resumed(saved_by, micro, **layout):
    """A new loader (LiBai's consumed_samples = 0: a resume with another global batch cannot trust it)
    given the saved position, as ``Checkpointer.load`` gives it to the checkpointable."""
    built = loader(micro, **layout)
    built.data_position.load_state_dict(saved_by.data_position.state_dict())
    return built


@pytest.mark.parametrize("new_batch", [16, 24, 32])
def test_a_changed_global_batch_continues_at_the_next_sample(new_batch):
    first = loader(32)
    before = flat(read(first, 2))
    after = flat(read(resumed(first, new_batch), 2))
    assert before == order(0, 0, 64)
    if 64 + new_batch <= SIZE:
        assert after[:new_batch] == order(0, 64, 64 + new_batch)
    # LiBai's position for the same iteration, start_iter x the new global batch, skips or repeats samples.
    libai = flat(read(loader(new_batch, consumed=2 * new_batch), 1))
    assert (libai == after[:new_batch]) == (new_batch == 32)


def test_an_epoch_whose_rest_cannot_fill_the_new_global_batch_ends_there():
    """Saved after 64 of 100 samples with a global batch of 32; resumed with 48: 64 + 48 > 100, so epoch 0
    ends (its last 36 samples skipped, as every epoch's tail is) and epoch 1 starts at its first sample."""
    first = loader(32)
    read(first, 2)
    second = resumed(first, 48)
    batches = read(second, 3)
    assert flat(batches[:2]) == order(1, 0, 96) and batches[2] == order(2, 0, 48)
    state = second.data_position.state_dict()
    assert (state["epoch"], state["step"]) == (2, 2 + 3), "the optimizer step counts on from the checkpoint's"


def test_the_position_is_layout_free():
    """Saved on dp2 (rank 1's loader), resumed on 1 rank and on dp4 with accumulation: same next samples."""
    saved = loader(16, dp=2, rank=1)
    read(saved, 2)
    one = flat(read(resumed(saved, 32), 1))
    dp4_acc2 = [read(resumed(saved, 4, dp=4, acc=2, rank=r), 2) for r in range(4)]
    assert one == flat(ranks[micro] for micro in range(2) for ranks in dp4_acc2) == order(0, 64, 96)


def test_consumed_samples_follow_libai_convention_after_an_elastic_resume():
    first = loader(32)
    read(first, 2)
    second = resumed(first, 16)
    read(second, 3)
    assert second.data_position.state_dict()["consumed_samples"] == 2 * 32 + 3 * 16


def test_the_saved_position_is_the_trainers_not_the_workers():
    """With workers the sampler runs ahead by the prefetched batches; the checkpoint holds what was read."""
    built = loader(8, workers=2)
    iterator = iter(built)
    assert built.sampler.consumed_samples == 0, "workers started before the first batch was asked for"
    batches = [next(iterator) for _ in range(3)]
    assert built.sampler.consumed_samples > 3 * 8
    state = built.data_position.state_dict()
    assert (state["step_start"], state["consumed_samples"]) == (24, 24)
    continued = resumed(built, 8, workers=2)
    assert flat(batches + read(continued, 2)) == order(0, 0, 40)


def test_a_restored_position_restarts_workers_already_running():
    built = loader(8, workers=2)
    iterator = iter(built)
    next(iterator)
    other = loader(8)
    read(other, 5)
    built.data_position.load_state_dict(other.data_position.state_dict())
    assert next(iterator) == order(0, 40, 48)


def as_instance(samples):
    return Instance(values=samples)


def test_each_batch_says_where_it_lies():
    """dp2 x acc2, micro-batch 4, rank 1: its rows of each global batch of 16 are positions 4-7 (micro-batch 0,
    positions 0-7 on both ranks) and 12-15 (micro-batch 1)."""
    sampler = GlobalOrderBatchSampler(Numbers(), 4, data_parallel_rank=1, data_parallel_size=2, seed=SEED,
                                      num_accumulation_steps=2)
    batches = read(GlobalOrderLoader(KeyedAugmentation(Numbers(), SEED, as_instance), sampler), 3)
    assert [batch_position(b) for b in batches] == [(0, 0, 0, 4, 4), (0, 0, 1, 12, 4), (0, 1, 0, 4, 4)]
    assert [b.get("values") for b in batches] == [order(0, 4, 8), order(0, 12, 16), order(0, 20, 24)]
    assert batch_position(read(loader(4), 1)[0]) is None, "a list (no Instance) carries no position"


@pytest.mark.parametrize("change, key", [
    (dict(seed=4), "train.seed"),
    (dict(size=90), "dataloader.train.dataset"),
])
def test_another_order_is_refused(change, key):
    first = loader(32)
    read(first, 1)
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        resumed(first, 32, **change)


def test_a_checkpoint_inside_an_optimizer_step_needs_the_same_split():
    """Eager accumulation, saved after micro-batch 1 of 2: what the step has read depends on its split."""
    first = loader(8, dp=2, acc=2)
    read(first, 1)
    resumed(first, 8, dp=2, acc=2, consumed=16)  # the same split, and LiBai's phase: accepted
    with pytest.raises(ValueError, match=r"micro-batch 1 .*train\.checkpointer\.period.*train\.num_accumulation_steps"):
        resumed(first, 16, dp=2, acc=1, consumed=32)


def test_libai_accumulation_phase_must_match():
    """LiBai's eager trainer resumes at iteration 3 with acc 2: the second micro-batch of a step.  A
    checkpoint at a step boundary (saved with acc 1) cannot continue there."""
    first = loader(16)
    read(first, 3)
    with pytest.raises(ValueError, match=r"micro-batch 0 .*micro-batch 1 of 2 .*train\.num_accumulation_steps=2"):
        resumed(first, 8, acc=2, consumed=3 * 8)


def test_the_guard_of_other_samplers_refuses_another_global_batch():
    guard = GlobalBatchGuard(32, "CyclicSampler")
    GlobalBatchGuard(32, "CyclicSampler").load_state_dict(guard.state_dict())
    with pytest.raises(ValueError, match=r"global batch 32.*train\.global_batch_size.*64.*CyclicSampler"):
        GlobalBatchGuard(64, "CyclicSampler").load_state_dict(guard.state_dict())
    # A global-order checkpoint resumed with LiBai's sampler: the global batch is checked too.
    with pytest.raises(ValueError, match="skip or repeat"):
        GlobalBatchGuard(64, "CyclicSampler").load_state_dict(loader(32).data_position.state_dict())


def test_a_resume_without_a_saved_position_is_said(caplog):
    built = loader(32, consumed=64)
    built.data_position.check_resumed(resumed=True)
    assert "holds no data position" in caplog.text and "consumed_samples=64" in caplog.text
