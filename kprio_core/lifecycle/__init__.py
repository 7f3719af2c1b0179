"""The life of a batch, as pure rules: what a tick decides, what a run of a batch does, and who may move it.

Moves (:data:`kprio_core.model.states.TRANSITIONS`): planned -> drained -> checked -> committed, or failed; back to
planned only by retry and replay. Which module holds which rules, who may make each move: docs/architecture.md.
No I/O, no clock: drivers gather :class:`TickInputs` once and carry out the actions.
"""

from kprio_core.lifecycle.budget import (
    batch_budget,
    batch_fixed_cost,
    batch_objectives,
    drain_rate,
    rate_tracker,
    rate_window,
)
from kprio_core.lifecycle.decision import (
    CarryOutLogChanges,
    Decision,
    FailDeadRun,
    FailUntaken,
    RecordPlan,
    Skip,
    Verdict,
)
from kprio_core.lifecycle.holds import describe_hold
from kprio_core.lifecycle.log_rules import log_decisions, needs_committed
from kprio_core.lifecycle.runs import (
    BatchRuns,
    Launch,
    RunState,
    RunSummary,
    Why,
)
from kprio_core.lifecycle.tick import decide_tick
from kprio_core.lifecycle.view import LedgerView, TickInputs

__all__ = [
    "BatchRuns",
    "CarryOutLogChanges",
    "Decision",
    "FailDeadRun",
    "FailUntaken",
    "Launch",
    "LedgerView",
    "RecordPlan",
    "RunState",
    "RunSummary",
    "Skip",
    "TickInputs",
    "Verdict",
    "Why",
    "batch_budget",
    "batch_fixed_cost",
    "batch_objectives",
    "decide_tick",
    "describe_hold",
    "drain_rate",
    "log_decisions",
    "needs_committed",
    "rate_tracker",
    "rate_window",
]
