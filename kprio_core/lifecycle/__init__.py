"""The life of a batch, as pure rules: what a tick decides, what a run of a batch does, and who may move it.

Three modules decide, one per moment of a batch's life: :mod:`kprio_core.lifecycle.tick`, what a
tick (the Dagster sensor, ``kprio drain``) does for one logical topic (heal, launch, plan, wait),
and :mod:`kprio_core.lifecycle.run`, what one run of a batch does given the ledger and its lease
(drain, re-drain, take over, commit only, wait, nothing, fail); :mod:`kprio_core.lifecycle.outcome`
decides what follows a run's drain, its checks and its commit (go on, split off, fail whole, publish,
mark committed, transient or not), for a replay too; :mod:`kprio_core.lifecycle.run_machine` is the order of a
run's stages, which the runtime executes. :mod:`kprio_core.lifecycle.log_rules` holds the tick's rules about
changes of the log kprio did not make. :mod:`kprio_core.lifecycle.loop` decides what ``kprio drain``'s loop
does after a tick (tick again, when, or stop and why).

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
    RecordPlan,
    Skip,
    TickAction,
    TickState,
    Verdict,
)
from kprio_core.lifecycle.holds import describe_hold, describe_holds, held_partitions
from kprio_core.lifecycle.log_rules import log_decisions, lost_partitions, needs_committed
from kprio_core.lifecycle.outcome import (
    Cause,
    FailWhole,
    GoOn,
    Publish,
    RangeDrained,
    Recheck,
    SplitOff,
    after_checks,
    after_drain,
)
from kprio_core.lifecycle.run import (
    BatchView,
    Drain,
    DrainFrom,
    Fail,
    Intent,
    Launcher,
    NothingToDo,
    Step,
    Wait,
    WaitWhy,
    decide_run,
)
from kprio_core.lifecycle.runs import (
    BatchRuns,
    Launch,
    LaunchReason,
    RunState,
    RunSummary,
    Why,
    run_key_of,
)
from kprio_core.lifecycle.tick import decide_tick
from kprio_core.lifecycle.view import Lag, LedgerView, TickInputs
from kprio_core.model.log_state import Decided, LogDecisions

__all__ = [
    "BatchRuns",
    "BatchView",
    "CarryOutLogChanges",
    "Cause",
    "Decided",
    "Decision",
    "Drain",
    "DrainFrom",
    "Fail",
    "FailDeadRun",
    "FailWhole",
    "GoOn",
    "Intent",
    "Lag",
    "Launch",
    "LaunchReason",
    "Launcher",
    "LedgerView",
    "LogDecisions",
    "NothingToDo",
    "Publish",
    "RangeDrained",
    "Recheck",
    "RecordPlan",
    "RunState",
    "RunSummary",
    "Skip",
    "SplitOff",
    "Step",
    "TickAction",
    "TickInputs",
    "TickState",
    "Verdict",
    "Wait",
    "WaitWhy",
    "Why",
    "after_checks",
    "after_drain",
    "batch_budget",
    "batch_fixed_cost",
    "batch_objectives",
    "decide_run",
    "decide_tick",
    "describe_hold",
    "describe_holds",
    "drain_rate",
    "held_partitions",
    "log_decisions",
    "lost_partitions",
    "needs_committed",
    "rate_tracker",
    "rate_window",
    "run_key_of",
]
