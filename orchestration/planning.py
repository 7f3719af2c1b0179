"""What the sensor would do for one logical topic right now: launch planned batches, plan one, or say why not.

The rules, applied in this order (why the order: the cheap ledger reads come first so a busy
topic costs no broker call; the broker is asked once; the plan is the last step):

1. a batch that is planned but has no run yet is launched again (its run key dedupes);
   a batch in flight whose last run ended without moving it is reported (someone must act);
2. a batch of the topic failed -> wait for an operator to retry it (a new plan would re-read its
   uncommitted offsets as another batch, leaving two outputs of one record);
3. ``planner.max_in_flight`` batches in flight -> wait;
4. the lag snapshot (an unreachable broker or a missing topic is a reason, not a crash);
5. offsets lost to retention and ``drain.allow_data_loss`` off -> stop and say where;
6. rate quotas: a throttled priority sits this batch out; all throttled -> wait;
7. no backlog -> nothing to do; else the planner's plan.

Nothing here writes: :func:`decide` is shared by the sensor (which then records the plan),
``kprio plan`` (which only shows it) and the manual ``plan_batch_job``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from kprio_core.burst import PollHistory
from kprio_core.config import KprioConfig, TopicSettings
from kprio_core.errors import BrokerUnreachable, KprioError
from kprio_core.ledger import Batch, BatchState, Ledger
from kprio_core.drain_plan import DrainPlan
from kprio_core.planner import Budget, plan_batch
from kprio_core.priority import Priority
from kprio_core.rate import RateQuotaTracker
from kprio_core.snapshot import LagSnapshot

FINISHED_RUN_STATUSES = frozenset({"SUCCESS", "FAILURE", "CANCELED"})
"""Dagster run statuses after which a run will not move its batch any more."""
ACTIVE_RUN_STATUSES = frozenset({"QUEUED", "NOT_STARTED", "STARTING", "STARTED", "MANAGED", "CANCELING"})


@dataclass(frozen=True)
class BatchRuns:
    """What Dagster knows of the runs of some batches: the latest drain run's status, and the run keys used.

    A planned batch needs a run when its attempt's run key was never used and no run of its
    partition is under way (a UI re-materialization replays the batch inside its own run: it
    must not get a second one).

    >>> from types import SimpleNamespace as B
    >>> planned = B(batch_id="b-000007", attempts=2, state=BatchState.PLANNED)
    >>> BatchRuns().needs_run(planned), BatchRuns({"b-000007": "STARTED"}).needs_run(planned)
    (True, False)
    >>> BatchRuns({"b-000007": "SUCCESS"}, frozenset({"b-000007.attempt-2"})).needs_run(planned)
    False
    """

    status: Mapping[str, str] = field(default_factory=dict)
    run_keys: frozenset[str] = frozenset()

    def needs_run(self, batch: Batch) -> bool:
        return (
            batch.state is BatchState.PLANNED
            and run_key(batch) not in self.run_keys
            and self.status.get(batch.batch_id) not in ACTIVE_RUN_STATUSES
        )

RATE_STATE = "rate.quota_tracker"
"""Name of the ledger state holding a topic's :class:`RateQuotaTracker`."""


IDLE, THROTTLED, BUSY, BLOCKED, PLAN, LAUNCH = "idle", "throttled", "busy", "blocked", "plan", "launch"
"""Kinds of decision. idle: no backlog; throttled: wait ``retry_in_s``; busy: a batch is in flight;
blocked: an operator must act (failed batch, lost offsets, broker error); plan / launch: a run."""


@dataclass(frozen=True)
class Decision:
    """The outcome for one topic: planned batches to launch, a new plan, or why there is none."""

    topic: str
    kind: str
    launch: tuple[Batch, ...] = ()
    plan: DrainPlan | None = None
    reason: str | None = None
    snapshot: LagSnapshot | None = None
    throttled: dict[Priority, float] = field(default_factory=dict)
    retry_in_s: float | None = None
    error: KprioError | None = None
    """The typed error behind a blocked decision (an unreachable broker), for callers that raise it."""

    def describe(self) -> str:
        if self.plan is not None:
            by_p = ", ".join(f"p{p}={n}" for p, n in self.plan.records_by_priority().items())
            return f"{self.topic}: plan {self.plan.records} records ({by_p})"
        if self.launch:
            return f"{self.topic}: launch {', '.join(b.batch_id for b in self.launch)}"
        return f"{self.topic}: {self.reason}"


def run_key(batch: Batch) -> str:
    """The run key of a batch's drain run: its id; a replayed attempt gets its own key.

    >>> from types import SimpleNamespace as B
    >>> run_key(B(batch_id="b-000042", attempts=1)), run_key(B(batch_id="b-000042", attempts=3))
    ('b-000042', 'b-000042.attempt-3')
    """
    return batch.batch_id if batch.attempts == 1 else f"{batch.batch_id}.attempt-{batch.attempts}"


def rate_tracker(config: KprioConfig, ledger: Ledger, topic: str) -> RateQuotaTracker:
    """The topic's rate tracker as saved in the ledger, under the quotas configured now."""
    quotas = {
        "records_per_s": {str(p): q.records_per_s for p, q in config.rate.quotas.items() if q.records_per_s},
        "bytes_per_s": {str(p): q.bytes_per_s for p, q in config.rate.quotas.items() if q.bytes_per_s},
        "samples": config.rate.samples,
        "window_s": config.rate.window_s,
    }
    saved = ledger.load_state(topic, RATE_STATE) or {}
    # Samples saved under other window settings would be measured wrongly: start afresh then.
    if saved.get("samples") != config.rate.samples or saved.get("window_s") != config.rate.window_s:
        saved = {}
    return RateQuotaTracker.from_dict({**saved, **quotas})


def poll_history(config: KprioConfig, ledger: Ledger, topic: TopicSettings) -> PollHistory:
    """The topic's poll-history windows from the ledger, or empty windows."""
    saved = ledger.load_poll_history(topic.name)
    if saved is not None and saved.n_priorities == topic.priorities:
        return saved
    return PollHistory(topic.priorities, config.planner.window_size, config.planner.maxed_out_threshold)


def decide(
    config: KprioConfig,
    topic: TopicSettings,
    *,
    edge,
    ledger: Ledger,
    now_s: float,
    runs: BatchRuns | None = None,
    priorities: Collection[Priority] | None = None,
    record_budget: int | None = None,
) -> Decision:
    """Apply the rules of the module docstring to ``topic`` at ``now_s`` (epoch seconds).

    ``runs``: the Dagster runs of the topic's batches in flight. ``priorities`` / ``record_budget``
    narrow the plan (the manual drain job); by default every priority and ``planner.record_budget``.
    """
    name = topic.name
    runs = runs or BatchRuns()
    in_flight = ledger.in_flight(name)
    to_launch = tuple(b for b in in_flight if runs.needs_run(b))
    if to_launch:
        return Decision(name, LAUNCH, launch=to_launch)
    # A batch in flight whose last run ended will not move by itself (its process died or a
    # step failed before the ledger heard of it): say so rather than wait for ever.
    stuck = [b for b in in_flight if runs.status.get(b.batch_id) in FINISHED_RUN_STATUSES]
    if stuck:
        b = stuck[0]
        return Decision(
            name,
            BLOCKED,
            reason=f"batch {b.batch_id} is {b.state.value} but its last run ended {runs.status[b.batch_id]}; "
            f"re-materialize its partition {b.batch_id} to finish it",
        )

    failed = ledger.batches(name, states=[BatchState.FAILED], limit=1)
    if failed:
        b = failed[0]
        return Decision(
            name,
            BLOCKED,
            reason=f"batch {b.batch_id} failed ({b.reason}); fix the cause and re-materialize its partition "
            f"{b.batch_id} (or backfill it) to retry",
        )
    if len(in_flight) >= config.planner.max_in_flight:
        b = in_flight[-1]
        status = runs.status.get(b.batch_id)
        run = f", run {status}" if status else ""
        return Decision(name, BUSY, reason=f"batch {b.batch_id} still in flight ({b.state.value}{run})")

    try:
        snapshot = edge.snapshot(topic, now_ms=int(now_s * 1000), avg_record_bytes=ledger.avg_record_bytes(name))
    except BrokerUnreachable as err:
        return Decision(name, BLOCKED, reason=f"broker unreachable: {err}", error=err)
    except KprioError as err:
        return Decision(name, BLOCKED, reason=f"cannot take the lag snapshot: {err} [{err.code}]", error=err)

    lost = snapshot.lost_to_retention()
    if lost and not config.drain.allow_data_loss:
        where = ", ".join(str(r) for r in lost)
        return Decision(
            name,
            BLOCKED,
            snapshot=snapshot,
            reason=f"offsets lost to retention before they were drained: {where}; set drain.allow_data_loss "
            "to drain past them (the gap is recorded)",
        )

    wanted = set(range(topic.priorities)) if priorities is None else set(priorities)
    backlog = snapshot.backlog_by_priority()
    tracker = rate_tracker(config, ledger, name)
    throttled = {p: t for p in wanted if backlog[p] and (t := tracker.throttle_time(p, now_s)) > 0}
    usable = {p for p in wanted if backlog[p] and p not in throttled}
    if not usable:
        if throttled:
            p, wait = min(throttled.items(), key=lambda item: item[1])
            return Decision(name, THROTTLED, snapshot=snapshot, throttled=throttled, retry_in_s=wait,
                            reason=f"throttled for {wait:.1f} s on priority {p}")
        return Decision(name, IDLE, snapshot=snapshot, reason="no backlog")

    budget = Budget(
        records=record_budget or config.planner.record_budget,
        bytes=config.planner.byte_budget,
        min_share=config.planner.min_share,
    )
    reserved = ledger.reserved_ranges(name)
    plan = plan_batch(
        only(snapshot, usable),
        budget,
        mode=config.planner.mode,
        distribution=config.planner.distribution,
        history=poll_history(config, ledger, topic),
        reserved=reserved,
    )
    # The plan saw the excluded priorities as idle; its record of the backlog must not.
    plan = dataclasses.replace(plan, backlog_before=snapshot.backlog_by_priority())
    if plan.is_empty:
        # With nothing reserved, only the byte budget can keep a backlog out of the plan: the
        # planner never exceeds it, so a budget below one record would stall draining silently.
        reason = (
            "no backlog outside the batches in flight fits the budget"
            if reserved
            else f"planner.byte_budget ({budget.bytes} bytes) is smaller than one record of every "
            "partition with backlog: raise it"
        )
        return Decision(name, BUSY, snapshot=snapshot, throttled=throttled, reason=reason)
    return Decision(name, PLAN, plan=plan, snapshot=snapshot, throttled=throttled)


def only(snapshot: LagSnapshot, priorities: Collection[Priority]) -> LagSnapshot:
    """The snapshot with the backlog of every other priority set to zero (its offsets untouched).

    The planner still sees every priority, so base quotas keep their meaning; an excluded
    priority just has nothing to drain and its quota flows to the others.
    """
    parts = tuple(
        p if p.priority in priorities else dataclasses.replace(p, high_watermark=p.next_offset)
        for p in snapshot.partitions
    )
    return dataclasses.replace(snapshot, partitions=parts)

