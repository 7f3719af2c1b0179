"""kprio_core's bottom floor: the values every other floor passes around, with no I/O and no rule above them.

offsets (``OffsetRange``), priority, snapshot (the lag snapshot), drain_plan (``DrainPlan``), records (``Batch``
and the other values the ledger hands out), states (``BatchState``, ``TRANSITIONS``), results (what each step
hands on), recovery (leases and the fencing token), ordering (``Ordering``, ``Lane``), log_state (what kprio
believes about a partition's log, and the changes it finds). They import only each other and ``kprio_core.errors``.
"""
