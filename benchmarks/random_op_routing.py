"""What routing OneFlow's random ops costs a call (the wrapper outside a forward, the keyed draw inside one), and
what keyed augmentation's check for OneFlow draws costs a batch.

    .venv/bin/python benchmarks/random_op_routing.py [--calls 2000] [--repeats 5] [--out FILE]

One process, one CPU thread of work per call:

* the wrapper alone, around a C function that does nothing (``len``);
* outside any forward (data augmentation, user code): OneFlow's own ``flow.rand(4)``,
  ``F.dropout(x, 0.5)`` on a (4, 4) tensor and ``x.bernoulli()``, called directly (the functions
  ``libai_ext.random.oneflow_draws`` keeps) and through the wrappers every name points at once
  routing is on: the wrapper counts the call and checks whether a forward is running;
* inside a watched model's forward, on a (32, 256) tensor: the routed op (the call site found on the
  stack, its stream, a keyed draw) against OneFlow's own op, run in the same kind of forward;
* keyed augmentation's checks around each batch of a dataset that draws nothing from OneFlow, against
  keying python's and numpy's streams alone, which is all a batch needs without a check: listening
  to the wrappers (what the main process does after an epoch's first batch), and the generator's
  state (saving OneFlow's CPU generator, seeding it with the probe seed, comparing its state,
  restoring it: loader workers, and the main process on an epoch's first batch).  Here nothing is
  queued; in a training step the state check also waits for the rank's queued work.

The variants take turns, ``--repeats`` rounds of ``--calls`` calls each (each round rotates which
goes first); the table gives each one's median time per call over the rounds and the ratio to
OneFlow's own.  Every OneFlow op is eager and asynchronous: the timings include the queueing on
the host, and each round ends by waiting for the queued work.
"""
import argparse
import os
import statistics
import sys
import time

from report import publish  # benchmarks/report.py (scripts run from benchmarks/)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def per_call(function, calls):
    import oneflow as flow

    start = time.perf_counter()
    for _ in range(calls):
        function()
    flow._oneflow_internal.eager.Sync()
    return (time.perf_counter() - start) / calls


def cases():
    import oneflow as flow

    from libai_ext.random.layers import stochastic_ops
    from libai_ext.random import draws, keyed_dataset, oneflow_draws

    stochastic_ops.route_stochastic_ops()
    own = {name: getattr(flow._C, name).__wrapped__ for name in ("rand", "dropout")}
    own_bernoulli = flow.Tensor.bernoulli.__wrapped__
    small, big = flow.full((4, 4), 0.5), flow.full((32, 256), 0.5)

    class Forward(flow.nn.Module):
        def __init__(self, draw):
            super().__init__()
            self.draw = draw

        def forward(self, x):
            return self.draw(x)

    def in_forward(draw, watched=True):
        model = Forward(draw)
        if watched:  # (OneFlow's own ops run in the forward of a model nobody watches)
            stochastic_ops.watch_model(model)

        def call():
            with draws.drawing_step(3):
                model(big)
        return call

    wrapped_len = oneflow_draws._wrapped("len", len)

    def batch_streams(probe):  # what keyed augmentation does around a batch, besides seeding each sample
        def call():
            with keyed_dataset.preserved_streams(oneflow=probe):
                if probe:
                    keyed_dataset.seed_oneflow_probe()
                    keyed_dataset.oneflow_untouched_since_probe()
        return call

    def listening():
        with keyed_dataset.preserved_streams(oneflow=False), keyed_dataset.oneflow_draws_heard() as heard:
            return bool(heard)

    return {
        "the wrapper alone": {"around len([])": (lambda: len(()), lambda: wrapped_len(()))},
        "outside a forward": {
            "rand(4)": (lambda: own["rand"](4), lambda: flow.rand(4)),
            "dropout (4, 4)": (lambda: own["dropout"](small, 0.5), lambda: flow.nn.functional.dropout(small, 0.5)),
            "Tensor.bernoulli (4, 4)": (lambda: own_bernoulli(small), lambda: small.bernoulli()),
        },
        "inside a forward, (32, 256)": {
            "rand": (in_forward(lambda x: own["rand"](*x.shape), False), in_forward(lambda x: flow.rand(*x.shape))),
            "dropout": (in_forward(lambda x: own["dropout"](x, 0.5), False),
                        in_forward(lambda x: flow.nn.functional.dropout(x, 0.5))),
            "Tensor.bernoulli": (in_forward(lambda x: own_bernoulli(x), False), in_forward(lambda x: x.bernoulli())),
        },
        "keyed augmentation, per batch": {
            "the wrappers heard, a dataset drawing nothing from OneFlow": (batch_streams(False), listening),
            "generator probe of a dataset drawing nothing from OneFlow": (batch_streams(False), batch_streams(True)),
        },
    }


def measure(calls, repeats):
    rows = []
    for where, ops in cases().items():
        for op, (own, routed) in ops.items():
            own(), routed()  # warm up: streams, caches, the first forward's check
            times = {"OneFlow's own": [], "routed": []}
            n = {"the wrapper alone": calls * 100, "keyed augmentation, per batch": calls // 10}.get(where, calls)
            for repeat in range(repeats):
                order = [("OneFlow's own", own), ("routed", routed)][::(-1) ** repeat]
                for label, function in order:
                    times[label].append(per_call(function, n))
            own_us, routed_us = (statistics.median(times[k]) * 1e6 for k in ("OneFlow's own", "routed"))
            rows.append(f"| {where} | {op} | {own_us:.2f} | {routed_us:.2f} | {routed_us / own_us:.2f} "
                        f"| {routed_us - own_us:+.2f} |")
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rows = measure(args.calls, args.repeats)
    text = "\n".join([
        "| where | op | OneFlow's own, unchecked (us/call) | routed, checked (us/call) | ratio | difference (us) |",
        "|---|---|---|---|---|---|", *rows, ""])
    publish(text, args.out, title="Routing OneFlow's random ops and keyed augmentation's probe, per call")


if __name__ == "__main__":
    main()
