"""A launched rank other than 0 waits for rank 0's bootstrap server before it imports OneFlow.

OneFlow 0.9.0 bootstraps inside ``import oneflow``, and a rank that asks before rank 0 listens sleeps a hard-coded
10 s (docs/upstream-bugs.md §18); waiting for the port costs milliseconds.  Standard library only, and ``import
libai_ext`` loads nothing else, so it runs before anything imports OneFlow.
"""
import os
import socket
import time

# Never longer than OneFlow's own retry would have slept: a job whose rank 0 never starts OneFlow loses at
# most these seconds.
MASTER_WAIT_S = 10.0


def wait_for_rank0_bootstrap(environ=None, rank0_exit=None, timeout_s=MASTER_WAIT_S, interval_s=0.05):
    """Return once ``MASTER_ADDR:MASTER_PORT`` accepts a connection, the file ``rank0_exit`` exists (rank 0
    has ended), or ``timeout_s`` passed; at once on rank 0 or outside a launcher (no ``MASTER_PORT``)."""
    environ = os.environ if environ is None else environ
    if int(environ.get("RANK", "0")) == 0 or "MASTER_PORT" not in environ:
        return
    address = (environ.get("MASTER_ADDR", "127.0.0.1"), int(environ["MASTER_PORT"]))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not (rank0_exit and os.path.exists(rank0_exit)):
        try:
            with socket.create_connection(address, timeout=1.0):
                return
        except OSError:
            time.sleep(interval_s)
