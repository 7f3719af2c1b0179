"""The lag verdict and the freshness objectives of a logical topic, from its lag snapshot and its ledger.

The rules are pure code (:mod:`kprio_core.verdict`, :mod:`kprio_core.freshness`); this gathers their inputs alike
for every driver: per partition, the ledger's newest ``verdict.intervals`` commits (each with the log end seen right
after it: Burrow's ring) and lag snapshots (the present, and those kept for ``verdict.window_s``); the holds; the facts
a breach's likely cause is told from. ``verdict.*`` make the policy, ``slo.*`` the objectives.

>>> from kprio_core.config import KprioConfig
>>> cfg = KprioConfig.model_validate({"slo": {"max_age_s": {2: 10, 0: 600}}, "verdict": {"expected_commit_s": 20}})
>>> verdict_policy(cfg).recent_s, sorted(objectives(cfg).items())
(60.0, [(0, Objective(max_age_s=600.0, warn_fraction=0.8)), (2, Objective(max_age_s=10.0, warn_fraction=0.8))])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kprio_core.config import KprioConfig, TopicSettings
from kprio_core.freshness import FreshnessFacts, FreshnessResult, Objective, evaluate_freshness
from kprio_core.ledger import Ledger
from kprio_core.model.offsets import TopicPartitionKey
from kprio_core.model.priority import Priority
from kprio_core.model.snapshot import LagSnapshot
from kprio_core.verdict import HoldReason, Observation, PartitionWindow, PriorityVerdict, VerdictPolicy, judge


@dataclass(frozen=True, slots=True)
class Held:
    """One held partition: its priority, the reason as a label, and the words a person reads."""

    priority: Priority
    reason: HoldReason
    text: str


@dataclass(frozen=True)
class TopicJudgement:
    """A logical topic judged at ``now_s``: every priority's verdict, its objectives' outcomes, its holds."""

    topic: str
    verdicts: tuple[PriorityVerdict, ...]
    freshness: tuple[FreshnessResult, ...]
    held: Mapping[TopicPartitionKey, Held]

    def verdict(self, priority: Priority) -> PriorityVerdict | None:
        return next((v for v in self.verdicts if v.priority == priority), None)



def verdict_policy(config: KprioConfig) -> VerdictPolicy:
    """The verdict's policy from ``verdict.*``."""
    v = config.verdict
    return VerdictPolicy(expected_commit_s=v.expected_commit_s, stop_factor=v.stop_factor, allowed_lag=v.allowed_lag,
                         intervals=v.intervals)


def objectives(config: KprioConfig) -> dict[Priority, Objective]:
    """Each priority's freshness objective from ``slo.*`` (a priority without ``max_age_s`` has none)."""
    return {p: Objective(age, warn_fraction=config.slo.warn_fraction) for p, age in config.slo.max_age_s.items()}


def held_partitions(config: KprioConfig, topic: TopicSettings, snapshot: LagSnapshot, ledger: Ledger | None
                    ) -> dict[TopicPartitionKey, Held]:
    """Why kprio does not drain each held partition of ``topic`` (none without a ledger: kprio believes nothing)."""
    from kprio_core.lifecycle.holds import describe_hold

    priority_of = {name: p for p, name in topic.priority_topics().items()}
    out: dict[TopicPartitionKey, Held] = {}
    if not config.drain.allow_data_loss:
        for lost in snapshot.lost_to_retention():
            if lost.topic in priority_of:
                out[(lost.topic, lost.partition)] = Held(priority_of[lost.topic], HoldReason.LOST_TO_RETENTION,
                                                         f"{lost} lost to retention")
    if ledger is None:
        return out
    for tp, event in ledger.beliefs.open_holds(topic.name).items():
        if tp[0] in priority_of:
            out[tp] = Held(priority_of[tp[0]], HoldReason.LOG_CHANGE,
                           f"{tp[0]}[{tp[1]}] {event.state}: waits for kprio reset")
    for hold in ledger.batches.holds(topic.name, max_attempts=config.recovery.max_attempts):
        if hold.topic in priority_of and (hold.topic, hold.partition) not in out:
            out[(hold.topic, hold.partition)] = Held(priority_of[hold.topic], HoldReason.of_batch_hold(hold.exhausted),
                                                     describe_hold(hold))
    return out


def snapshot_observations(snapshot: LagSnapshot, held: Mapping[TopicPartitionKey, Held], at_s: float
                          ) -> dict[TopicPartitionKey, tuple[Priority, Observation]]:
    """Each partition of a lag snapshot as a look of the verdict, with its hold and its oldest pending record's time.

    >>> from kprio_core.model.snapshot import PartitionLag
    >>> snap = LagSnapshot("orders", 3, (PartitionLag("orders-2", 0, 2, 0, 1000, 880, oldest_pending_ms=55_000),))
    >>> snapshot_observations(snap, {}, at_s=60.0)[("orders-2", 0)]
    (2, Observation(at_s=60.0, committed=880, end=1000, log_start=0, held=None, hold=None, commit=False, oldest_pending_s=55.0))
    """
    out = {}
    for part in snapshot.partitions:
        tp = (part.topic, part.partition)
        hold = held.get(tp)
        oldest = part.oldest_pending_ms / 1000 if part.backlog and part.oldest_pending_ms is not None else None
        out[tp] = (part.priority, Observation(at_s, part.committed, part.readable_end, part.log_start,
                                              held=hold.text if hold is not None else None,
                                              hold=hold.reason if hold is not None else None, oldest_pending_s=oldest))
    return out


def commit_observations(ledger: Ledger, topic: TopicSettings, intervals: int
                        ) -> dict[TopicPartitionKey, list[Observation]]:
    """The ledger's newest ``intervals`` commit samples of each partition of ``topic``, as commits of the verdict."""
    out: dict[TopicPartitionKey, list[Observation]] = {}
    for s in ledger.samples.commits(topic.name, intervals):
        out.setdefault((s.topic, s.partition), []).append(
            Observation(s.at.timestamp(), s.committed, s.log_end, commit=True))
    return out


def last_commits(topic: TopicSettings, commits: Mapping[TopicPartitionKey, Sequence[Observation]]
                 ) -> dict[Priority, float]:
    """When each priority of ``topic`` last committed (Unix seconds), over its partitions' commit samples."""
    priority_of = {name: p for p, name in topic.priority_topics().items()}
    out: dict[Priority, float] = {}
    for (name, _), seen in commits.items():
        if name in priority_of and seen:
            out[priority_of[name]] = max(out.get(priority_of[name], 0.0), seen[-1].at_s)
    return out


def windows_of(present: Mapping[TopicPartitionKey, tuple[Priority, Observation]],
               *histories: Mapping[TopicPartitionKey, Sequence[Observation]]) -> list[PartitionWindow]:
    """One window per partition of the present snapshot: its earlier observations from ``histories``, then now (one
    the present does not list, a deleted topic's, is left out: the verdict judges what drains)."""
    out = []
    for tp, (priority, now) in sorted(present.items()):
        seen = [o for h in histories for o in h.get(tp, ()) if o.at_s <= now.at_s]
        out.append(PartitionWindow(tp[0], tp[1], priority, (*seen, now)))
    return out


def freshness_facts(config: KprioConfig, topic: TopicSettings, priority: Priority, snapshot: LagSnapshot,
                    held: Mapping[TopicPartitionKey, Held], ledger: Ledger | None, last_commit_s: float | None,
                    now_s: float) -> FreshnessFacts:
    """What is known of ``priority`` for a breach's likely cause: its holds, full slots, last commit, backlog."""
    busy: tuple[str, ...] = ()
    if ledger is not None:
        busy = tuple(ledger.batches.full_priorities(topic.name, config.planner.max_in_flight).get(priority, ()))
    return FreshnessFacts(
        held=tuple(h.text for tp, h in sorted(held.items()) if h.priority == priority
                   and any(p.backlog for p in snapshot.of_priority(priority) if (p.topic, p.partition) == tp)),
        busy=busy,
        since_commit_s=None if last_commit_s is None else max(0.0, now_s - last_commit_s),
        backlog=sum(p.backlog for p in snapshot.of_priority(priority)),
    )


def oldest_age_s(snapshot: LagSnapshot, priority: Priority, now_s: float) -> float | None:
    """The age of the priority's oldest pending record (None: nothing pending, or the age was not read)."""
    stamps = [p.oldest_pending_ms for p in snapshot.of_priority(priority) if p.backlog and p.oldest_pending_ms]
    return max(0.0, now_s - min(stamps) / 1000) if stamps else None


def judge_topic(config: KprioConfig, topic: TopicSettings, snapshot: LagSnapshot, ledger: Ledger | None, *,
                now_s: float, history: Mapping[TopicPartitionKey, Sequence[Observation]] | None = None
                ) -> TopicJudgement:
    """The verdicts and freshness outcomes of ``topic`` at ``now_s`` (the snapshot is the present); ``history``:
    earlier looks a long-running caller kept (:func:`remember`; the ledger's commits are read here)."""
    held = held_partitions(config, topic, snapshot, ledger)
    present = snapshot_observations(snapshot, held, now_s)
    commits = commit_observations(ledger, topic, config.verdict.intervals) if ledger is not None else {}
    verdicts = judge(windows_of(present, history or {}, commits), now_s=now_s,
                     policy=verdict_policy(config))
    last = last_commits(topic, commits)
    results = tuple(
        evaluate_freshness(topic.name, p, age_s=oldest_age_s(snapshot, p, now_s), objective=goal,
                           facts=freshness_facts(config, topic, p, snapshot, held, ledger, last.get(p), now_s))
        for p, goal in sorted(objectives(config).items(), reverse=True) if p < topic.priorities)
    return TopicJudgement(topic.name, verdicts, results, held)


def remember(config: KprioConfig, history: dict[TopicPartitionKey, list[Observation]], snapshot: LagSnapshot,
             judged: TopicJudgement, now_s: float) -> None:
    """Keep a snapshot's looks in a long-running caller's ``history``, for ``verdict.window_s`` (the next
    verdicts' recent log ends, moves of the group, and the backlog of partitions never committed)."""
    for tp, (_, seen) in snapshot_observations(snapshot, judged.held, now_s).items():
        history[tp] = trimmed([*history.get(tp, ()), seen], now_s, config.verdict.window_s)


def trimmed(history: Iterable[Observation], now_s: float, window_s: float, keep: int = 240) -> list[Observation]:
    """A kept history without what fell out of the window (and at most ``keep`` observations, the newest).

    >>> [o.at_s for o in trimmed([Observation(t, 0, 0) for t in (0, 50, 90, 100)], now_s=100, window_s=60)]
    [50, 90, 100]
    """
    return [o for o in history if o.at_s >= now_s - window_s][-keep:]
