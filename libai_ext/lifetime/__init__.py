"""A rank's process lifetime: the wait for rank 0's bootstrap before OneFlow starts (``bootstrap_wait``), the end
with the launcher (``launcher``), preemption (``preemption``, ``preemption_signals``), the output folder's lock
(``output_lock``), the ranks' agreement (``agreement``) and the tests' fault points (``fault_points``).

May import ``compat`` and ``config``.  Nothing is imported here: ``bootstrap_wait`` runs before OneFlow's import.
"""
