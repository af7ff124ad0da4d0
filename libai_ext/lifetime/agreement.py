"""Every rank acting on one rank's findings: a barrier, a broadcast of a python object, an "any rank" flag."""
import logging
import pickle

import oneflow as flow


def barrier():
    if flow.env.get_world_size() > 1:
        flow.comm.barrier()


def broadcast_object(value, src=0):
    """``value`` as rank ``src`` holds it, on every rank (the others pass anything, e.g. None)."""
    if flow.env.get_world_size() == 1:
        return value
    payload = pickle.dumps(value) if flow.env.get_rank() == src else None
    return pickle.loads(flow._oneflow_internal.cpu_broadcast(payload, src))


def agree_on(src, compute):
    """Run ``compute()`` on rank ``src`` only and hand every rank its result.

    An exception on ``src`` is raised on every rank (with its message): no rank waits in the broadcast for it."""
    outcome, error = None, None
    if flow.env.get_rank() == src:
        try:
            outcome = ("value", compute())
        except Exception as e:  # handed to every rank below
            outcome, error = ("error", f"{type(e).__name__}: {e}"), e
            # In this rank's own log before any other rank hears of it: a launcher that stops the job when
            # the first rank exits may end this one before its traceback is written.
            logging.getLogger(__name__).error(outcome[1])
    kind, value = broadcast_object(outcome, src)
    if error is not None:
        raise error
    if kind == "error":
        raise RuntimeError(f"rank {src} failed: {value}")
    return value


def any_rank(flag):
    """True on every rank if ``flag`` is true on any rank: a collective that every rank must call at
    the same point; it returns once every rank got there."""
    return flags_read(flags_sent(flag))


def flags_sent(flag):
    """Start gathering one flag from every rank (an all-gather on CPU, so it waits for no device work);
    returns at once, before the other ranks get there.  ``flags_read`` gives the answer."""
    world_size = flow.env.get_world_size()
    local = flow.tensor([1 if flag else 0], dtype=flow.int32)
    if world_size == 1:
        return local
    placement = flow.placement("cpu", ranks=list(range(world_size)))
    # check_meta=False: every rank's part is one int, nothing to check; with the check, OneFlow would
    # have every rank wait here for all the others.
    return local.to_global(placement=placement, sbp=flow.sbp.split(0), check_meta=False) \
        .to_global(sbp=flow.sbp.broadcast)


def flags_read(flags):
    """Whether any flag gathered by ``flags_sent`` is set; waits until every rank's flag arrived."""
    local = flags.to_local() if flags.is_global else flags
    return bool(local.numpy().any())
