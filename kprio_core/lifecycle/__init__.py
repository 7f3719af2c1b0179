"""The life of a batch, as pure rules: what a tick decides, what a run of a batch does, and who may move it.

Which module holds which rules (the tick's, the run's, what follows a drain, the log's, the loop's):
docs/architecture.md, "kprio_core/lifecycle: the rules of a batch's life".

A batch's states are :class:`kprio_core.model.states.BatchState` and the one table of allowed moves is
:data:`kprio_core.model.states.TRANSITIONS` (planned -> drained -> checked -> committed, or failed;
failed and committed go back to planned only through retry and replay). Who may move each, and
through which ledger method: docs/architecture.md, "Who may move each".

Nothing in this package reads the ledger, the broker, an orchestrator or the clock: drivers gather
the inputs once (:class:`TickInputs`) and carry out the decision's actions (``orchestration.runtime``).
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
