"""Config keys and their checks: every key libai_ext reads, its default and meaning (``keys``), LiBai's own keys
read from the installed LiBai (``libai_keys``), the guard against misspelt keys (``key_guard``) and the checks of
a config's values before training (``checks``).

May import ``compat``.  Nothing is imported here: ``keys`` is the standard library only, so that the tools answer
``--help`` without OneFlow.
"""
