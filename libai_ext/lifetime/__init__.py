"""A rank's process lifetime: waiting for rank 0's bootstrap before OneFlow starts (``bootstrap_wait``), ending
with the launcher (``launcher``), preemption's signals and the stop after a committed save (``preemption``,
``preemption_signals``), the output folder's lock (``output_lock``), the collectives every rank agrees with
(``agreement``) and the points where the tests' fault hook acts (``fault_points``).

May import ``compat`` and ``config``.  Nothing is imported here: ``bootstrap_wait`` runs before OneFlow's import.
"""
