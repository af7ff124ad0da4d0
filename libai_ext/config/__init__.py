"""Config keys and their checks: every key libai_ext reads, with its default and meaning (``keys``), LiBai's keys
read from the installed LiBai (``libai_keys``), the misspelt-key guard (``key_guard``), value checks (``checks``).

May import nothing of libai_ext. Nothing is imported here: ``keys`` is the standard library only, so that the tools answer
``--help`` without OneFlow.
"""
