"""kprio_core's bottom floor: the values every other floor passes around, with no I/O and no rule above them.

Its modules import only each other and ``kprio_core.errors``.
"""
