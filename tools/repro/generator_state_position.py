"""OneFlow 0.9.0: a restored CPU generator state repeats its draws only from a block boundary.

    python tools/repro/generator_state_position.py   # one process, ~10 s, OneFlow only

``flow.get_rng_state()`` keeps the Mersenne Twister's 624 words but not the position within
them: after a draw, saving the state and restoring it gives other numbers than the ones that
followed the save.  Without a draw before the save it works, which hides the bug in tests that
save right after seeding.
"""
import oneflow as flow

from _common import verdict


def repeats_after_restore(draw_before_save):
    flow.manual_seed(0)
    if draw_before_save:
        flow.rand(4)
    state = flow.get_rng_state()
    after_save = flow.rand(4)
    flow.set_rng_state(state)
    after_restore = flow.rand(4)
    return bool((after_save == after_restore).all())


fresh, drawn = repeats_after_restore(False), repeats_after_restore(True)
print(f"oneflow {flow.__version__}: restored state repeats the draws: right after seeding {fresh}, "
      f"after one draw {drawn}")
verdict(fresh and not drawn, "a CPU generator state saved after a draw does not repeat the draws that followed")
