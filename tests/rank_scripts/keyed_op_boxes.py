"""On 4 ranks: every rank's box of the keyed-dropout op, eager on global tensors (what GPU ranks run).

For each shape, placement hierarchy ((4,), (2, 2), (1, 4), (4, 1)), sbp (each split axis, broadcast, partial sum;
on 2-d hierarchies pairs of them) and micro-batch (0; 3 of 5 on (4,)), ``y`` and ``dx`` gathered whole equal the 1-rank
mask (``counter_rng.local_keep_mask`` over the whole shape, then ``apply_keep``) bit for bit: each rank found its
own slice from the placement and sbp.  Records ``{"cases": n, "mismatched": [...]}``.
"""
import itertools

import numpy as np
import oneflow as flow

from libai_ext.random import counter_rng, keyed_op
from libai_ext.random.global_index import StepRows
from libai_ext.random.layers.stochastic import apply_keep, dropout_scale
from libai_ext.testing import write_rank_result

RATE = 0.3
SHAPES = [(9,), (5, 7), (4, 6, 5), (5, 2, 1025)]
B, P = flow.sbp.broadcast, flow.sbp.partial_sum


def expected(shape, keys, micro):
    rows = StepRows(5, micro) if micro else None
    x = flow.tensor((np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) - 7) / 3)
    keep = counter_rng.local_keep_mask(shape, [0] * len(shape), list(shape), keys, RATE, rows=rows)
    return x.numpy(), apply_keep(x, keep, dropout_scale(RATE)).numpy(), np.where(keep.numpy(), dropout_scale(RATE), 0)


def layouts(ndim):
    one_d = [flow.sbp.split(d) for d in range(ndim)] + [B, P]
    yield [0, 1, 2, 3], [[s] for s in one_d]
    for ranks in ([[0, 1], [2, 3]], [[0, 1, 2, 3]], [[0], [1], [2], [3]]):
        yield ranks, [list(pair) for pair in itertools.product(one_d, repeat=2)
                      if not (pair[0] == P and pair[1] == P)]


def splittable(shape, hierarchy, sbp):
    """OneFlow 0.9.0 splits a dimension only into at most as many parts as it has positions."""
    parts = [1] * len(shape)
    for size, s in zip(hierarchy, sbp):
        for d in range(len(shape)):
            if s == flow.sbp.split(d):
                parts[d] *= size
    return all(n <= size for n, size in zip(parts, shape))


def main():
    assert keyed_op.load(), keyed_op.status()[1]
    level, scale = counter_rng.keep_level(RATE), dropout_scale(RATE)
    cases, mismatched = 0, []
    for shape, micro in itertools.product(SHAPES, (0, 3)):
        keys = counter_rng.stream_keys(99, "boxes", 4, micro)
        data, want_y, want_dx = expected(shape, keys, micro)
        for ranks, sbps in layouts(len(shape)):
            if micro and np.asarray(ranks).ndim > 1:  # a micro-batch's offset: on the 1-d hierarchy only
                continue
            placement = flow.placement("cpu", ranks=ranks)
            whole = [B] * np.asarray(ranks).ndim
            for sbp in sbps:
                if not splittable(shape, np.asarray(ranks).shape, sbp):
                    continue
                x = flow.tensor(data, placement=placement, sbp=whole).to_global(sbp=sbp).requires_grad_()
                y = keyed_op.keyed_dropout(x, keys, level, scale, micro)
                y.sum().backward()
                got_y = y.to_global(sbp=whole).to_local().numpy()
                got_dx = x.grad.to_global(sbp=whole).to_local().numpy()
                cases += 1
                if not (np.array_equal(got_y, want_y) and np.array_equal(got_dx, want_dx)):
                    mismatched.append(f"{shape} {ranks} {sbp} micro {micro}")
    write_rank_result(cases=cases, mismatched=mismatched)


if __name__ == "__main__":
    main()
