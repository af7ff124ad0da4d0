"""Every rank acting on one rank's findings: a barrier and a broadcast of a python object."""
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

    An exception on ``src`` is raised on every rank (with ``src``'s message), so no rank is
    left waiting in the broadcast for a rank that failed.
    """
    outcome, error = None, None
    if flow.env.get_rank() == src:
        try:
            outcome = ("value", compute())
        except Exception as e:  # handed to every rank below
            outcome, error = ("error", f"{type(e).__name__}: {e}"), e
    kind, value = broadcast_object(outcome, src)
    if error is not None:
        raise error
    if kind == "error":
        raise RuntimeError(f"rank {src} failed: {value}")
    return value
