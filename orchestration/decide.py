"""What to do for one logical topic right now: which batches need a run, what to plan next, and what waits.

One small rule per question, combined in :func:`decide` in this order (why: batches already
recorded come first, so a crash or a failure is healed before new work is added; the cheap
ledger reads come before the one broker call; the plan is the last step, and it only sees
what no earlier rule holds):

1. :func:`resume_stuck` — a batch in flight whose run died (lease expired, owner gone, run
   ended without moving it) gets a new attempt with the same ranges;
2. :func:`launch_unlaunched` — a planned batch no run was ever requested for gets its run;
3. :func:`launch_commits` — a checked batch whose earlier batches committed gets a commit run;
4. :func:`retry_failed` — a failed batch with attempts left gets a retry once its backoff is
   over and its priorities have a free slot;
5. :func:`held_partitions` — every failed batch holds its partitions from its failed range's
   start (only those partitions wait: every other partition and priority keeps draining);
   a batch *superseded* on a partition (planned on an earlier incarnation of it than the one
   kprio drains now, :func:`kprio_core.log_changes.superseded`) never runs again (no retry,
   resume or launch) and holds nothing, so the new incarnation drains on;
6. the lag snapshot (an unreachable broker or a missing topic is a reason, not a crash);
7. :func:`decide_log_changes` — changes of the log kprio did not make (``kprio_core.log_changes``):
   a held partition waits for ``kprio reset``; a policy reset that would start a new incarnation
   under a batch in flight on the partition waits (held) until that batch fails or finishes; a
   restore, a policy reset or an accepted move is decided here and carried out by the tick (which records it) before the plan; a moved-back
   offset re-drains its committed batches' exact ranges, one batch at a time in a free slot; a
   batch with ranges only on a deleted priority topic gets no run (the topic-deleted hold says why);
   :func:`lost_partitions` — offsets deleted by retention before they were drained hold their
   partition (or are drained past and recorded when ``drain.allow_data_loss``);
8. :func:`free_priorities` — a priority whose ``planner.max_in_flight`` slots are taken sits
   this plan out, so urgent work never waits for a bulk batch of another priority;
9. :func:`throttled_priorities` — a priority over its rate quota sits this plan out;
10. :func:`batch_budget` — the record budget, sized to ``planner.target_batch_s`` from the
    throughput the ledger measured;
11. the planner's plan of what is left.

Nothing here writes: the sensor records the plan and requests the runs, ``kprio plan`` shows the
decision, ``plan_batch_job`` records a narrowed plan.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import dagster as dg

from kprio_core.config import KprioConfig, OnOffsetOutOfRange, TopicSettings
from kprio_core.drain_plan import DrainPlan
from kprio_core.errors import BrokerUnreachable, KprioError
from kprio_core.ledger import Batch, BatchState, Hold, Ledger
from kprio_core.log_changes import (
    Belief,
    Change,
    LogState,
    Outcome,
    Superseded,
    hold_reason,
    in_flight_blocks_reset,
    observe,
    outcome_of,
    redrain_ranges,
    reset_target,
    with_commits_under_way,
)
from kprio_core.offsets import OffsetRange
from kprio_core.planner import Budget, held_range, plan_batch
from kprio_core.priority import Priority
from kprio_core.rate import RateQuotaTracker
from kprio_core.recovery import may_retry, parse_owner
from kprio_core.snapshot import LagSnapshot
from orchestration.tags import RUNNER_TAG

ACTIVE_RUN_STATUSES = frozenset({
    dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.MANAGED, dg.DagsterRunStatus.CANCELING,
})
"""Run statuses of a run that may still move its batch."""
WILL_RETRY_TAG = "dagster/will_retry"
"""Dagster's run-retry daemon sets it to "true" on a failed run it is about to retry."""
MIN_TARGET_RECORDS = 100
"""Smallest batch the target duration may size: below it a batch is all fixed cost."""


class Action(str, enum.Enum):
    """The outcome of a decision for one logical topic."""

    LAUNCH = "launch"
    """Recorded batches need runs (new, retried, resumed or to commit); a plan may come too."""
    PLAN = "plan"
    """A new batch."""
    THROTTLED = "throttled"
    """Every priority with backlog is over its rate quota: wait ``retry_in_s``."""
    BUSY = "busy"
    """Every priority with backlog has its slots taken by batches in flight."""
    HELD = "held"
    """The only backlog left is on partitions held by failed batches or lost offsets."""
    BLOCKED = "blocked"
    """Nothing can be planned: the broker is unreachable or a topic is missing."""
    IDLE = "idle"
    """No backlog."""

    def __str__(self) -> str:
        return self.value


class Why(str, enum.Enum):
    """Why a recorded batch needs a run."""

    NEW = "new"
    """Planned, and no run was ever requested for it."""
    RETRY = "retry"
    """It failed; attempts are left and its backoff is over."""
    RESUME = "resume"
    """It is in flight but its run died: the same attempt's work is taken over by a new attempt."""
    COMMIT = "commit"
    """Checked, and the batches before it on its partitions committed: only the commit is left."""
    REDRAIN = "redrain"
    """Committed, and its group's offset moved back over it outside kprio: its exact ranges are drained again
    (the run key is a new attempt's, so a later tick's launch of the same attempt is the same run)."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Launch:
    """A run to request for a recorded batch: which attempt it is for, and why."""

    batch: Batch
    why: Why
    attempt: int

    @property
    def run_key(self) -> str:
        """Deterministic, so Dagster launches a run key once: ``b-000042``, ``b-000042.attempt-2``, ...

        >>> from types import SimpleNamespace as B
        >>> [Launch(B(batch_id="b-000042"), w, a).run_key for w, a in ((Why.NEW, 1), (Why.RETRY, 2), (Why.COMMIT, 2))]
        ['b-000042', 'b-000042.attempt-2', 'b-000042.commit-2']
        """
        if self.why is Why.COMMIT:
            return f"{self.batch.batch_id}.commit-{self.attempt}"
        return self.batch.batch_id if self.attempt == 1 else f"{self.batch.batch_id}.attempt-{self.attempt}"

    def describe(self) -> str:
        return f"{self.batch.batch_id} ({self.why}, attempt {self.attempt})"


@dataclass(frozen=True)
class RunSummary:
    """What the sensor needs of one Dagster run of a batch."""

    run_id: str
    status: dg.DagsterRunStatus
    tags: Mapping[str, str] = field(default_factory=dict)
    orphaned: bool = False
    """Unfinished, but the kprio process that executed it in process is gone (it never ends by itself)."""

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_RUN_STATUSES and not self.orphaned


@dataclass(frozen=True)
class BatchRuns:
    """The Dagster runs of some batches, whatever their job name (newest first), and the run keys used.

    >>> from types import SimpleNamespace as B
    >>> runs = BatchRuns({"b-000007": (RunSummary("r2", dg.DagsterRunStatus.STARTED),)}, frozenset({"b-000007"}))
    >>> runs.active("b-000007").run_id, runs.active("b-000008")
    ('r2', None)
    """

    runs: Mapping[str, tuple[RunSummary, ...]] = field(default_factory=dict)
    run_keys: frozenset[str] = frozenset()

    def of(self, batch_id: str) -> tuple[RunSummary, ...]:
        return tuple(self.runs.get(batch_id, ()))

    def active(self, batch_id: str) -> RunSummary | None:
        return next((r for r in self.of(batch_id) if r.active), None)

    def latest(self, batch_id: str) -> RunSummary | None:
        runs = self.of(batch_id)
        return runs[0] if runs else None

    def orphaned(self, batch_id: str) -> tuple[RunSummary, ...]:
        return tuple(r for r in self.of(batch_id) if r.orphaned)

    def dagster_will_retry(self, batch_id: str) -> bool:
        """The latest run failed and Dagster's run-retry daemon will launch its retry."""
        latest = self.latest(batch_id)
        return (latest is not None and latest.status is dg.DagsterRunStatus.FAILURE
                and latest.tags.get(WILL_RETRY_TAG) == "true")


@dataclass(frozen=True)
class Decided:
    """One change of the log and what this tick does about it (carried out by the tick, shown by ``kprio plan``)."""

    change: Change
    outcome: Outcome
    decided_by: str = "rule"
    """``rule`` or ``policy`` (``drain.on_offset_out_of_range``)."""
    target: int | None = None
    """The offset a restore or a reset commits."""
    incarnation: int = 1
    """The incarnation drained after this decision (+1 after a reset of a recreated or truncated log)."""
    redrain: tuple[Batch, ...] = ()
    """Committed batches re-drained (their exact ranges) after the committed offset moved back."""

    def describe(self) -> str:
        """What was seen and what is done.

        >>> c = Change("o-2", 0, LogState.COMMITTED_GONE, 70, None, 0, 90)
        >>> Decided(c, Outcome.RESTORE, target=70).describe()
        'o-2[0] committed offsets gone: the group has no committed offset, kprio committed 70 (expired after offsets.retention.minutes without a commit); log [0,90) -> restore 70 (rule)'
        """
        what = str(self.outcome)
        if self.target is not None:
            what += f" {self.target}"
        if self.redrain:
            what += " " + ", ".join(f"{b.batch_id}" for b in self.redrain)
        if self.incarnation > self.change.incarnation:
            what += f", incarnation {self.incarnation}"
        return f"{self.change.describe()} -> {what} ({self.decided_by})"


@dataclass(frozen=True)
class Decision:
    """The outcome for one topic: runs to request, a new plan, what waits and why."""

    topic: str
    action: Action
    launch: tuple[Launch, ...] = ()
    plan: DrainPlan | None = None
    holds: tuple[Hold, ...] = ()
    waiting: tuple[str, ...] = ()
    """Why some work waits (retries waiting for a backoff or a slot, full priorities, throttles)."""
    stuck: tuple[tuple[Batch, str], ...] = ()
    """Batches whose run died, with why (the sensor marks their runs failed)."""
    reason: str | None = None
    snapshot: LagSnapshot | None = None
    throttled: Mapping[Priority, float] = field(default_factory=dict)
    retry_in_s: float | None = None
    error: KprioError | None = None
    """The typed error behind a blocked decision, for callers that raise it (``kprio plan``)."""
    changes: tuple[Change, ...] = ()
    """Every partition's log state this tick (``kprio lag`` shows them; ok ones included)."""
    decided: tuple[Decided, ...] = ()
    """What this tick does about changes of the log kprio did not make (the tick carries them out first)."""
    superseded: tuple[Superseded, ...] = ()
    """Failed batches planned on an earlier incarnation of a partition: never run again, hold nothing."""

    def describe(self) -> str:
        """One line: the topic, what happens for it, and what waits."""
        return f"{self.topic}: {self.summary()}"

    def summary(self) -> str:
        """What happens, and what waits (without the topic's name)."""
        parts = []
        if self.launch:
            parts.append("launch " + ", ".join(x.describe() for x in self.launch))
        if self.plan is not None:
            by_p = ", ".join(f"p{p}={n}" for p, n in self.plan.records_by_priority().items() if n)
            parts.append(f"plan {self.plan.records} records ({by_p})")
        if not parts and self.reason:
            parts.append(self.reason)
        if self.holds:
            parts.append(describe_holds(self.holds))
        return "; ".join(parts)


def describe_holds(holds: Sequence[Hold]) -> str:
    """Which partitions wait, since which offset, for which batch, and what a person does about it.

    The partitions one failure holds share one clause: its reason is said once, not once per partition.

    >>> from types import SimpleNamespace as H
    >>> describe_holds([H(topic="o-0", partition=1, start=1200, batch_id="b-000007", attempts=3,
    ...                   reason="values_match_schema failed", exhausted=True, retry_at=None)])
    'held: o-0[1] from 1200 by b-000007 (failed 3 times: values_match_schema failed; fix the cause, then kprio retry b-000007)'
    >>> describe_holds([H(topic="o-0", partition=p, start=10 * p, batch_id="b-000009", attempts=1,
    ...                   reason="drain failed: disk full", exhausted=False, retry_at=None) for p in (0, 1)])
    'held: o-0[0] from 0, o-0[1] from 10 by b-000009 (failed once: drain failed: disk full; retried by itself)'
    """
    clauses: dict[str, list[Hold]] = {}
    for h in holds:
        clauses.setdefault(_hold_cause(h), []).append(h)
    return "held: " + "; ".join(
        ", ".join(f"{h.topic}[{h.partition}] from {h.start}" for h in same) + " " + cause
        for cause, same in clauses.items())


def describe_hold(hold: Hold) -> str:
    """One held partition: where, since which offset, and why (:func:`describe_holds` for several)."""
    return f"{hold.topic}[{hold.partition}] from {hold.start} {_hold_cause(hold)}"


def _hold_cause(hold: Hold) -> str:
    """What holds a partition and what happens next, without naming the partition."""
    if hold.batch_id is None:  # offsets lost to retention
        return f"({hold.reason})"
    if hold.exhausted:
        remedy = f"fix the cause, then kprio retry {hold.batch_id}"
    elif hold.retry_at is not None:
        remedy = f"retried by itself at {hold.retry_at:%H:%M:%S} UTC"
    else:
        remedy = "retried by itself"
    times = "once" if hold.attempts == 1 else f"{hold.attempts} times"
    return f"by {hold.batch_id} (failed {times}: {hold.reason}; {remedy})"


# --- rules about recorded batches -------------------------------------------------------------


def resume_stuck(in_flight: Iterable[Batch], runs: BatchRuns, *, now: datetime,
                 owner_dead: Callable[[str], bool]) -> list[tuple[Batch, str]]:
    """Batches in flight whose run died: lease expired or owner gone, or no live run can move them.

    A batch waiting for its first run (planned, never launched) is not stuck; nor is one with a
    live lease, or one another run (Dagster's own retry, say) is about to take over.
    """
    stuck = []
    for batch in in_flight:
        lease = batch.lease
        owner = parse_owner(lease.owner) if lease is not None else None
        owner_run = owner.run_id if owner is not None else None
        others = [r for r in runs.of(batch.batch_id) if r.active and r.run_id != owner_run]
        if others or runs.dagster_will_retry(batch.batch_id):
            continue  # another run is on its way to take it over
        if lease is not None:
            if lease.expired(now):
                stuck.append((batch, f"its lease (held by {lease.owner}) expired at {lease.until:%H:%M:%S} UTC"))
            elif owner_dead(lease.owner):
                stuck.append((batch, f"the process holding its lease ({lease.owner}) is gone"))
            continue
        latest = runs.latest(batch.batch_id)
        if latest is None or latest.active:
            continue
        if batch.state is BatchState.PLANNED and run_key_of(batch, Why.NEW) not in runs.run_keys:
            continue  # the run of this attempt was never requested: launch_unlaunched's case
        if batch.state is BatchState.CHECKED:
            continue  # waits for earlier batches to commit: launch_commits' case
        if latest.orphaned:
            why = (f"its run {latest.run_id[:8]} is {latest.status.value} but the process running it "
                   f"({latest.tags.get(RUNNER_TAG)}) is gone")
        else:
            why = f"its last run {latest.run_id[:8]} ended {latest.status.value} without finishing it"
        stuck.append((batch, why))
    return stuck


def launch_unlaunched(in_flight: Iterable[Batch], runs: BatchRuns) -> list[Launch]:
    """Planned batches whose current attempt never got a run requested."""
    return [
        Launch(b, Why.NEW, b.attempts)
        for b in in_flight
        if b.state is BatchState.PLANNED and b.lease is None and runs.active(b.batch_id) is None
        and run_key_of(b, Why.NEW) not in runs.run_keys
    ]


def launch_commits(ready: Iterable[Batch], runs: BatchRuns) -> list[Launch]:
    """Checked batches whose earlier batches committed, with no run of their own under way."""
    return [
        Launch(b, Why.COMMIT, b.attempts)
        for b in ready
        if b.lease is None and runs.active(b.batch_id) is None and run_key_of(b, Why.COMMIT) not in runs.run_keys
    ]


def retry_failed(failed: Iterable[Batch], runs: BatchRuns, *, now: datetime, max_attempts: int,
                 full: Mapping[Priority, Sequence[str]]) -> tuple[list[Launch], list[str]]:
    """Failed batches to retry now, and why the others that may be retried still wait."""
    launches, waiting = [], []
    for b in failed:
        if not b.holds or (not b.transient and not may_retry(attempts=b.attempts, max_attempts=max_attempts)):
            continue
        if runs.active(b.batch_id) is not None or runs.dagster_will_retry(b.batch_id):
            continue  # a run (or Dagster's own retry) is on it
        if b.retry_at is not None and b.retry_at > now:
            waiting.append(f"{b.batch_id} retries at {b.retry_at:%H:%M:%S} UTC")
            continue
        busy = sorted(p for p in b.priorities if p in full)
        if busy:
            waiting.append(f"{b.batch_id} waits for a slot of priority {', '.join(map(str, busy))}")
            continue
        launches.append(Launch(b, Why.RETRY, b.attempts + 1))
    return launches, waiting


def held_partitions(holds: Iterable[Hold]) -> tuple[OffsetRange, ...]:
    """The planner's reservations for partitions held by failed batches: from the failed range's start on."""
    return tuple(held_range(h.topic, h.partition, h.start) for h in holds)


# --- rules about the snapshot -----------------------------------------------------------------


RESETS = (Outcome.RESET_EARLIEST, Outcome.RESET_LATEST)
NEW_LOG = (LogState.AHEAD_OF_LOG, LogState.TOPIC_RECREATED)
"""States where the log below the old committed offset is another log: a reset starts a new incarnation."""


def decide_log_changes(changes: Iterable[Change], policy: OnOffsetOutOfRange, allow_data_loss: bool, *,
                       drained: Callable[[str, int], list[Batch]],
                       redraining: Collection[tuple[str, int]],
                       slots: Mapping[Priority, Sequence[str]] | None = None,
                       max_in_flight: int | None = None,
                       in_flight_on: Mapping[tuple[str, int], Sequence[str]] | None = None,
                       ) -> tuple[tuple[Decided, ...], tuple[Hold, ...]]:
    """What to do about every change that is not ok, and the partitions it holds.

    ``drained(topic, partition)``: the committed batches of that partition's current incarnation
    (a moved-back offset re-drains their exact ranges); ``redraining``: partitions whose re-drain
    is in flight (held until it is done, without deciding again). Retention gaps are left to
    :func:`lost_partitions`.

    A moved-back partition re-drains one committed batch at a time, oldest first: the one covering
    the offset the group stands at. Its commit moves the group to that batch's end, so the next
    tick sees the partition still moved back and re-drains the next one. Why: the re-drains of one
    partition then commit in offset order (two at once could commit the later first and fail with
    a gap under the Dagster daemon), and each takes a ``planner.max_in_flight`` slot of its
    priorities like any batch (``slots``: the batches in flight per priority); a re-drain whose
    priority has no free slot waits, held, for the next tick.

    ``in_flight_on``: the batches in flight per partition. A policy reset that would start a new
    incarnation waits, held, while one is (it fails or finishes on its own; a new incarnation
    never starts under a batch that may still publish or commit the earlier one's offsets).
    """
    decided: list[Decided] = []
    holds: list[Hold] = []
    in_use = {p: list(ids) for p, ids in (slots or {}).items()}
    picked: set[str] = set()
    for c in changes:
        if c.state in (LogState.OK, LogState.LOST_TO_RETENTION):
            continue
        tp = (c.topic, c.partition)
        outcome = outcome_of(c, policy, allow_data_loss=allow_data_loss)
        by = "policy" if outcome in RESETS else "rule"
        if outcome is Outcome.REDRAIN and tp in redraining:
            holds.append(_change_hold(c, c.committed or 0, f"re-draining after: {c.describe()}", person=False))
            continue
        if outcome is Outcome.REDRAIN:
            batches = drained(c.topic, c.partition)
            by_range = {r: b for b in batches for r in b.plan.offset_ranges() if r.topic_partition == tp}
            chosen = redrain_ranges(c.committed or 0, c.believed or 0, by_range)
            if chosen is None:
                outcome = Outcome.HOLD
                holds.append(_change_hold(c, c.committed or 0, hold_reason(c) + " (the ledger has no drained "
                                          "ranges covering it to re-drain exactly)"))
                decided.append(Decided(c, outcome, incarnation=c.incarnation))
                continue
            first = by_range[chosen[0]]
            busy = [] if first.batch_id in picked else sorted(
                p for p in first.priorities if max_in_flight is not None and len(in_use.get(p, ())) >= max_in_flight)
            if busy:
                taken = ", ".join(in_use[busy[0]])
                holds.append(_change_hold(c, c.committed or 0, f"re-drain of {first.batch_id} waits for a slot of "
                                          f"priority {', '.join(map(str, busy))} ({taken} in flight) after: "
                                          f"{c.describe()}", person=False))
                decided.append(Decided(c, outcome, incarnation=c.incarnation))
                continue
            again = () if first.batch_id in picked else (first,)
            picked.add(first.batch_id)
            for p in first.priorities:
                in_use.setdefault(p, []).append(first.batch_id)
            rest = f" (then {len(chosen) - 1} more range(s), one batch at a time)" if len(chosen) > 1 else ""
            holds.append(_change_hold(c, c.committed or 0, f"re-draining {first.batch_id}{rest} after: "
                                      f"{c.describe()}", person=False))
            decided.append(Decided(c, outcome, incarnation=c.incarnation, redrain=again))
            continue
        if outcome in RESETS and (wait := in_flight_blocks_reset(c, c.state in NEW_LOG,
                                                                  (in_flight_on or {}).get(tp, ()))):
            start = c.committed if c.committed is not None else (c.believed or 0)
            holds.append(_change_hold(c, start, f"{wait}; after: {c.describe()}", person=False))
            decided.append(Decided(c, Outcome.HOLD, by, incarnation=c.incarnation))
            continue
        if outcome is Outcome.HOLD:
            start = c.committed if c.committed is not None else (c.believed or 0)
            holds.append(_change_hold(c, start, hold_reason(c)))
        incarnation = c.incarnation + 1 if outcome in RESETS and c.state in NEW_LOG else c.incarnation
        decided.append(Decided(c, outcome, by, reset_target(c, outcome), incarnation))
    return tuple(decided), tuple(holds)


def _change_hold(c: Change, start: int, reason: str, *, person: bool = True) -> Hold:
    """A hold of a change of the log: from ``start``, ``exhausted`` when only a person ends it."""
    return Hold(topic=c.topic, partition=c.partition, start=start, batch_id=None, state=None, reason=reason,
                attempts=0, retry_at=None, exhausted=person)


def after_decisions(snapshot: LagSnapshot, decided: Iterable[Decided]) -> LagSnapshot:
    """The snapshot as it stands once the tick has committed the restores and resets it decided."""
    targets = {(d.change.topic, d.change.partition): d.target for d in decided if d.target is not None}
    if not targets:
        return snapshot
    parts = tuple(dataclasses.replace(p, committed=targets[(p.topic, p.partition)])
                  if (p.topic, p.partition) in targets else p for p in snapshot.partitions)
    return dataclasses.replace(snapshot, partitions=parts)


def incarnations(beliefs: Mapping[tuple[str, int], Belief], decided: Iterable[Decided]) -> dict[str, int]:
    """Incarnation per partition (``topic[partition]``) above 1, after this tick's decisions (the output identity)."""
    out = {f"{b.topic}[{b.partition}]": b.incarnation for b in beliefs.values() if b.incarnation > 1}
    for d in decided:
        if d.incarnation > 1:
            out[d.change.where] = d.incarnation
    return out


def lost_partitions(snapshot: LagSnapshot, allow_data_loss: bool) -> tuple[Hold, ...]:
    """Partitions whose undrained offsets retention deleted, held unless ``drain.allow_data_loss``.

    Reported alike whether or not the partition was ever committed.
    """
    if allow_data_loss:
        return ()
    return tuple(
        Hold(topic=r.topic, partition=r.partition, start=r.start, batch_id=None, state=None,
             reason=f"offsets [{r.start},{r.end}) lost to retention before they were drained; set "
                    "drain.allow_data_loss to drain past them (the gap is recorded)",
             attempts=0, retry_at=None, exhausted=True)
        for r in snapshot.lost_to_retention()
    )


def free_priorities(wanted: Collection[Priority], full: Mapping[Priority, Sequence[str]]) -> set[Priority]:
    """Priorities with a free slot (``planner.max_in_flight`` per priority).

    >>> sorted(free_priorities({0, 1, 2}, {0: ["b-000003"]}))
    [1, 2]
    """
    return {p for p in wanted if p not in full}


def throttled_priorities(tracker: RateQuotaTracker, backlog: Mapping[Priority, int], wanted: Collection[Priority],
                         now_s: float) -> dict[Priority, float]:
    """Priorities with backlog that are over their rate quota, with the seconds they must wait."""
    return {p: t for p in wanted if backlog.get(p) and (t := tracker.throttle_time(p, now_s)) > 0}


def batch_budget(config: KprioConfig, throughput: float | None, record_budget: int | None = None) -> Budget:
    """The plan's budget: the record budget, cut to ``planner.target_batch_s`` of measured throughput.

    A batch of a throughput measured as 20,000 records/s aims at 2 s: 40,000 records.

    >>> cfg = KprioConfig.model_validate({"planner": {"record_budget": 50000, "target_batch_s": 2}})
    >>> batch_budget(cfg, 20_000.0).records, batch_budget(cfg, None).records, batch_budget(cfg, 10.0).records
    (40000, 50000, 100)
    """
    planner = config.planner
    records = record_budget or planner.record_budget
    if planner.target_batch_s is not None and throughput:
        records = min(records, max(MIN_TARGET_RECORDS, math.ceil(throughput * planner.target_batch_s)))
    return Budget(records=records, bytes=planner.byte_budget, min_share=planner.min_share)


def rate_tracker(config: KprioConfig, ledger: Ledger, topic: str) -> RateQuotaTracker:
    """The topic's rate tracker under the quotas configured now, fed by what the ledger says was drained."""
    quotas = config.rate.quotas
    return ledger.rate_tracker(
        topic,
        records_per_s={p: q.records_per_s for p, q in quotas.items() if q.records_per_s},
        bytes_per_s={p: q.bytes_per_s for p, q in quotas.items() if q.bytes_per_s},
        samples=config.rate.samples, window_s=config.rate.window_s,
    )


def beliefs_of(ledger: Ledger, logical_topic: str) -> dict[tuple[str, int], Belief]:
    """What kprio believes about the topic's partitions, with the commits of its checked batches under way
    (Kafka is told before the ledger: the group standing at a checked range's end is kprio's own commit)."""
    checked = ledger.batches(logical_topic, states=[BatchState.CHECKED])
    return with_commits_under_way(ledger.beliefs(logical_topic), [r for b in checked for r in b.plan.offset_ranges()])


def committed_batches(ledger: Ledger, logical_topic: str, topic: str, partition: int,
                      beliefs: Mapping[tuple[str, int], Belief]) -> list[Batch]:
    """Committed batches with a range on ``topic[partition]`` of its current incarnation, oldest first."""
    belief = beliefs.get((topic, partition))
    incarnation = belief.incarnation if belief is not None else 1
    return [b for b in ledger.batches(logical_topic, states=[BatchState.COMMITTED])[::-1]
            if b.plan.incarnation_of(topic, partition) == incarnation
            and any(r.topic_partition == (topic, partition) for r in b.plan.offset_ranges())]


def run_key_of(batch: Batch, why: Why) -> str:
    return Launch(batch, why, batch.attempts).run_key


# --- the rules combined -----------------------------------------------------------------------


def decide(
    config: KprioConfig,
    topic: TopicSettings,
    *,
    edge,
    ledger: Ledger,
    now_s: float,
    runs: BatchRuns | None = None,
    owner_dead: Callable[[str], bool] = lambda owner: False,
    priorities: Collection[Priority] | None = None,
    record_budget: int | None = None,
) -> Decision:
    """Apply the rules of the module docstring to ``topic`` at ``now_s`` (epoch seconds).

    ``runs``: the Dagster runs of the topic's batches in flight or failed. ``owner_dead`` tells
    whether a lease owner is gone (its run ended, or its process on this host). ``priorities`` /
    ``record_budget`` narrow the plan (the manual plan job); by default every priority and the
    configured budget.
    """
    name = topic.name
    runs = runs or BatchRuns()
    now = datetime.fromtimestamp(now_s, UTC)
    recovery = config.recovery

    in_flight = ledger.in_flight(name)
    stuck = resume_stuck(in_flight, runs, now=now, owner_dead=owner_dead)
    launch = [Launch(b, Why.RESUME, b.attempts + 1) for b, _ in stuck]
    stuck_ids = {b.batch_id for b, _ in stuck}
    launch += launch_unlaunched([b for b in in_flight if b.batch_id not in stuck_ids], runs)
    launch += launch_commits([b for b in ledger.ready_to_commit(name) if b.batch_id not in stuck_ids], runs)
    max_in_flight = config.planner.max_in_flight
    full = ledger.full_priorities(name, max_in_flight)
    superseded = tuple(ledger.superseded(name))  # failed on an earlier incarnation: no run, no hold (the ledger's)
    gone = {s.batch_id for s in superseded}
    retries, waiting = retry_failed([b for b in ledger.batches(name, states=[BatchState.FAILED])
                                     if b.batch_id not in gone], runs, now=now,
                                    max_attempts=recovery.max_attempts, full=full)
    launch += retries
    holds = tuple(ledger.holds(name, max_attempts=recovery.max_attempts))

    base = {"topic": name, "launch": tuple(launch), "stuck": tuple(stuck), "holds": holds, "superseded": superseded}
    beliefs = beliefs_of(ledger, name)
    try:
        snapshot = edge.snapshot(topic, now_ms=int(now_s * 1000), avg_record_bytes=ledger.avg_record_bytes(name),
                                 deleted_ok={b.topic for b in beliefs.values()})
    except BrokerUnreachable as err:
        return _without_plan(base, Action.BLOCKED, f"broker unreachable: {err}", tuple(waiting), error=err)
    except KprioError as err:
        return _without_plan(base, Action.BLOCKED, f"cannot take the lag snapshot: {err} [{err.code}]",
                             tuple(waiting), error=err)

    changes = observe(snapshot, beliefs)
    if snapshot.deleted:
        # A batch with ranges only on a deleted priority topic cannot run (its retries would fail alike until
        # the loop gives up): no run for it, and its partitions wait under the topic-deleted hold, for a person.
        gone = set(snapshot.deleted)
        only_gone = {b.batch_id for b in [*in_flight, *ledger.batches(name, states=[BatchState.FAILED])]
                     if (on := {r.topic for r in b.plan.offset_ranges() if r.count}) and on <= gone}
        launch = [x for x in launch if x.batch.batch_id not in only_gone]
        holds = tuple(h for h in holds if h.topic not in gone)
        base.update(launch=tuple(launch), holds=holds)
    redraining = {r.topic_partition for b in in_flight if b.replay_of_committed for r in b.plan.offset_ranges()}
    slots = ledger.full_priorities(name, 1)  # every priority with a batch in flight: the slots in use
    in_flight_on: dict[tuple[str, int], list[str]] = {}
    for b in in_flight:
        for tp in sorted({r.topic_partition for r in b.plan.offset_ranges() if r.count}):
            in_flight_on.setdefault(tp, []).append(b.batch_id)
    decided, change_holds = decide_log_changes(
        changes, config.drain.on_offset_out_of_range, config.drain.allow_data_loss,
        drained=lambda t, q: committed_batches(ledger, name, t, q, beliefs), redraining=redraining,
        slots=slots, max_in_flight=max_in_flight, in_flight_on=in_flight_on)
    redrains = [b for d in decided for b in d.redrain]
    if redrains:  # a re-drain takes its priorities' slots like any batch: the plan below sees them taken
        for b in redrains:
            for p in b.priorities:
                slots.setdefault(p, []).append(b.batch_id)
        full = {p: ids for p, ids in slots.items() if len(ids) >= max_in_flight}
    snapshot = after_decisions(snapshot, decided)
    holds += change_holds
    holds += lost_partitions(snapshot, config.drain.allow_data_loss)
    base.update(holds=holds, changes=changes, decided=decided)
    launch += [Launch(b, Why.REDRAIN, b.attempts + 1) for d in decided for b in d.redrain]
    base["launch"] = tuple(launch)
    reserved = [*ledger.reserved_ranges(name), *held_partitions(holds)]
    open_backlog = _open_backlog(snapshot, reserved)
    wanted = set(range(topic.priorities)) if priorities is None else set(priorities)
    with_backlog = {p for p in wanted if open_backlog.get(p)}
    if not with_backlog:
        out_of_log = any(h.batch_id is None and h.exhausted for h in change_holds)
        action = (Action.HELD if holds and (any(snapshot.backlog_by_priority().values()) or out_of_log)
                  else Action.IDLE)
        reason = "no backlog outside held partitions" if action is Action.HELD else "no backlog"
        if any(b.in_flight for b in in_flight) and action is Action.IDLE:
            reason = "no backlog outside the batches in flight"
        return _without_plan(base, action, reason, tuple(waiting), snapshot=snapshot)

    free = free_priorities(with_backlog, full)
    waiting += [f"priority {p} waits for its slot ({', '.join(full[p])} in flight)"
                for p in sorted(with_backlog - free, reverse=True)]
    tracker = rate_tracker(config, ledger, name)
    throttled = throttled_priorities(tracker, open_backlog, free, now_s)
    usable = free - set(throttled)
    if not usable:
        if throttled:
            p, wait = min(throttled.items(), key=lambda item: item[1])
            return _without_plan(base, Action.THROTTLED, f"throttled for {wait:.1f} s on priority {p}",
                                 tuple(waiting), snapshot=snapshot, throttled=throttled, retry_in_s=wait)
        return _without_plan(base, Action.BUSY, "; ".join(waiting), tuple(waiting), snapshot=snapshot)

    budget = batch_budget(config, ledger.throughput(name), record_budget)
    plan = plan_batch(
        only(snapshot, usable),
        budget,
        mode=config.planner.mode,
        distribution=config.planner.distribution,
        history=ledger.poll_history(name, topic.priorities, config.planner.window_size,
                                    config.planner.maxed_out_threshold),
        reserved=reserved,
    )
    # The plan saw excluded priorities as idle; its record of the backlog must not.
    plan = dataclasses.replace(plan, backlog_before=snapshot.backlog_by_priority(),
                               lost=() if not config.drain.allow_data_loss else plan.lost,
                               incarnations=incarnations(beliefs, decided),
                               log_changes=tuple(d.describe() for d in decided if d.outcome is not Outcome.HOLD))
    if plan.is_empty:
        # Only the byte budget can keep an open backlog out of the plan (the planner never exceeds it).
        reason = (f"planner.byte_budget ({budget.bytes} bytes) is smaller than one record of every partition "
                  "with backlog: raise it")
        return _without_plan(base, Action.BUSY, reason, tuple(waiting), snapshot=snapshot, throttled=throttled)
    return Decision(action=Action.LAUNCH if launch else Action.PLAN, plan=plan, waiting=tuple(waiting),
                    snapshot=snapshot, throttled=throttled, **base)


def _without_plan(base: dict, action: Action, reason: str, waiting: tuple[str, ...], **more) -> Decision:
    """A decision that plans nothing: LAUNCH when recorded batches need runs, else ``action``."""
    if base["launch"] and action is not Action.BLOCKED:
        action = Action.LAUNCH
    return Decision(action=action, reason=reason, waiting=waiting, **base, **more)


def _open_backlog(snapshot: LagSnapshot, reserved: Sequence[OffsetRange]) -> dict[Priority, int]:
    """Backlog per priority outside every reservation (what a plan could take)."""
    from kprio_core.planner import fair_shares

    shares = fair_shares(snapshot, reserved)
    return {p: share.capacity for p, share in shares.items()}


def only(snapshot: LagSnapshot, priorities: Collection[Priority]) -> LagSnapshot:
    """The snapshot with the backlog of every other priority set to zero (its offsets untouched).

    The planner still sees every priority, so base quotas keep their meaning; an excluded
    priority just has nothing to drain and its quota flows to the others.
    """
    parts = tuple(
        p if p.priority in priorities else dataclasses.replace(p, high_watermark=p.next_offset, stable_offset=None)
        for p in snapshot.partitions
    )
    return dataclasses.replace(snapshot, partitions=parts)
