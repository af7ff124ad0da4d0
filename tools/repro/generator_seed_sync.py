"""OneFlow 0.9.0: seeding a generator, or reading or setting its state, waits for all queued work.

    .venv/bin/python tools/repro/generator_seed_sync.py   # ~10 s

Eager ops are queued and run by OneFlow's virtual machine while Python goes on.  `Generator.manual_seed`,
`get_state` and `set_state` first wait until every op queued on this rank has run, even on a generator
created a moment ago that no queued op uses; creating one does not wait.  Code that re-seeds a generator
before each random op (one seed per call, as a pure function of what the call is) therefore gives up
the overlap of Python with execution at every call: under pipeline parallelism each stage's host waits.
"""
import time

import oneflow as flow

from _common import verdict

x = flow.randn(1200, 1200)


def queue_work():
    """About two seconds of queued matmuls on this project's 2 cores; returns their result (not yet computed)."""
    y = x
    for _ in range(12):
        y = flow.matmul(y, x) * 1e-3
    return y


def time_with_queue(call):
    """Seconds ``call`` took with the queue full, and seconds the queue took in all."""
    start = time.perf_counter()
    pending = queue_work()
    before = time.perf_counter()
    call()
    took = time.perf_counter() - before
    pending.numpy()
    return took, time.perf_counter() - start


seeded = flow.Generator(device="cpu")
seeded.manual_seed(7)
state = seeded.get_state()
calls = {
    "create a generator": lambda: flow.Generator(device="cpu"),
    "manual_seed of a new generator": lambda: flow.Generator(device="cpu").manual_seed(1),
    "get_state": seeded.get_state,
    "set_state of a new generator": lambda: flow.Generator(device="cpu").set_state(state),
}
times = {name: time_with_queue(call) for name, call in calls.items()}
for name, (took, queue) in times.items():
    print(f"{name}: {1e3 * took:.1f} ms while {1e3 * queue:.0f} ms of work was queued", flush=True)
waits = [name for name, (took, queue) in times.items() if took > 0.5 * queue]
verdict(set(waits) == set(calls) - {"create a generator"},
        "seeding a generator, or reading or setting its state, waits for all queued work "
        f"(waited: {', '.join(waits) or 'none'})")
