"""``priority_lag_sensor``: every tick, heal and launch recorded batches, plan the next one, say what waits.

For every logical topic :func:`orchestration.decide.decide` says what to do; :func:`tick` then

- marks failed the Dagster runs of batches whose run died (their lease expired or their process
  is gone), so the UI tells the truth, and requests a new attempt with the same ranges;
- requests runs for batches that need one (new, retry after backoff, resume, commit), with a
  deterministic run key per attempt, the attempt and why as tags, and one tag per priority slot
  the batch takes (the shipped ``dagster.yaml`` limits those to ``planner.max_in_flight``);
- records a new plan in the ledger, adds its ``kprio_batches`` partition and requests its run.

A tick that launches nothing says why (held partitions and their remedy included) in its skip
reason. The sensor finds a batch's runs by their partition tag, whatever launched them (the UI's
asset page, a backfill, a retry), and never requests a run while one is queued or running.

Why the sensor writes to the ledger and fails dead runs (STYLE.md wants sensors without side
effects of their own): recording the plan *is* step 4 of DESIGN.md and must happen before the
run exists so two batches never reserve the same offsets; failing a run whose process is gone
only records what already happened. Both are idempotent: a plan recorded on a tick whose result
Dagster lost is a planned batch without a run, launched on the next tick with the same run key.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, replace

import dagster as dg

from kprio_core.config import KprioConfig
from kprio_core.errors import KprioError, RangeConflict
from kprio_core.ledger import Batch, BatchState, Ledger
from kprio_core.recovery import parse_owner
from orchestration.adoption import ensure_adopted
from orchestration.decide import Action, BatchRuns, Decision, Launch, RunSummary, Why, decide
from orchestration.log_changes import carry_out
from orchestration.leases import owner_dead, owner_dead_in
from orchestration.partitions import batch_partitions
from orchestration.resources import KafkaResource, KprioSettings, LedgerResource
from orchestration.tags import ATTEMPT_TAG, PARTITION_TAG, RUN_KEY_TAG, RUNNER_TAG, TOPIC_TAG, WHY_TAG, slot_tags

SENSOR_NAME = "priority_lag_sensor"
RUNS_PER_BATCH = 10
"""Newest runs read per batch (enough to see the active one and the latest outcome)."""


def existing_runs(instance: dg.DagsterInstance, batches: Iterable[Batch]) -> BatchRuns:
    """The runs of each batch (any job: found by partition tag), newest first, and the run keys used."""
    runs = {}
    for batch in batches:
        records = instance.get_run_records(filters=dg.RunsFilter(tags={PARTITION_TAG: batch.batch_id}),
                                           limit=RUNS_PER_BATCH)
        runs[batch.batch_id] = tuple(summary(r.dagster_run) for r in records)
    keys = frozenset(r.tags[RUN_KEY_TAG] for rs in runs.values() for r in rs if RUN_KEY_TAG in r.tags)
    return BatchRuns(runs, keys)


def run_request(launch: Launch) -> dg.RunRequest:
    batch = launch.batch
    return dg.RunRequest(
        run_key=launch.run_key,
        partition_key=batch.batch_id,
        tags={TOPIC_TAG: batch.logical_topic, ATTEMPT_TAG: str(launch.attempt), WHY_TAG: launch.why.value,
              **slot_tags(batch.logical_topic, batch.priorities)},
    )


def summary(run: dg.DagsterRun) -> RunSummary:
    """A run as the rules see it; one a killed kprio process executed in process is ``orphaned``."""
    tags = dict(run.tags)
    runner = tags.get(RUNNER_TAG)
    orphaned = not run.is_finished and runner is not None and owner_dead(runner)
    return RunSummary(run.run_id, run.status, tags, orphaned=orphaned)


def fail_dead_runs(instance: dg.DagsterInstance, batch: Batch, why: str,
                   orphaned: Iterable[RunSummary] = ()) -> list[str]:
    """Mark failed the unfinished Dagster runs of ``batch`` whose process is gone: the one that held its
    lease, and ``orphaned`` ones (executed in process by a kprio that was killed); their ids."""
    owner = parse_owner(batch.lease.owner) if batch.lease else None
    ids = [owner.run_id] if owner and owner.run_id else []
    ids += [r.run_id for r in orphaned if r.run_id not in ids]
    failed = []
    for run_id in ids:
        run = instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            continue
        instance.report_engine_event(f"kprio: the run of batch {batch.batch_id} died: {why}; a new attempt takes "
                                     "over with the same ranges", run)
        instance.report_run_failed(run)
        failed.append(run_id)
    return failed


@dataclass(frozen=True)
class Tick:
    """One evaluation over every logical topic: the decisions, the runs to request, the partitions added."""

    decisions: tuple[Decision, ...]
    requests: tuple[dg.RunRequest, ...]
    partitions: tuple[str, ...]
    reasons: tuple[str, ...]

    @property
    def skip_reason(self) -> str:
        return "; ".join(self.reasons) or "no logical topic configured"


def tick(instance: dg.DagsterInstance, edge, ledger: Ledger, config: KprioConfig, *, now_s: float | None = None,
         log=None) -> Tick:
    """Evaluate every topic at ``now_s``: record plans, fail dead runs, and return the runs to request."""
    now_s = time.time() if now_s is None else now_s
    ensure_adopted(instance, ledger, edge, config, log=log)
    decisions, requests, partitions, reasons = [], [], [], []
    for topic in config.topics:
        watched = [*ledger.in_flight(topic.name), *ledger.batches(topic.name, states=[BatchState.FAILED])]
        runs = existing_runs(instance, watched)
        decision = decide(config, topic, edge=edge, ledger=ledger, now_s=now_s, runs=runs,
                          owner_dead=owner_dead_in(instance))
        for batch, why in decision.stuck:
            for run_id in fail_dead_runs(instance, batch, why, runs.orphaned(batch.batch_id)):
                _info(log, f"{topic.name}: run {run_id[:8]} of {batch.batch_id} marked failed: {why}")
        try:
            carry_out(edge, ledger, topic, decision, log=log, max_in_flight=config.planner.max_in_flight)
        except KprioError as err:  # nothing planned on a decision that could not be carried out
            reasons.append(f"{topic.name}: could not carry out {', '.join(d.describe() for d in decision.decided)}: "
                           f"{err}")
            decisions.append(decision)
            continue
        launches = list(decision.launch)
        if decision.plan is not None:
            try:
                batch = ledger.record_plan(with_log_changes(ledger, decision.plan),
                                           max_in_flight=config.planner.max_in_flight)
                launches.append(Launch(batch, Why.NEW, batch.attempts))
                partitions.append(batch.batch_id)
            except RangeConflict as err:  # another planner (the manual job) got there first
                reasons.append(f"{topic.name}: {err}")
        for launch in launches:
            _info(log, f"{topic.name}: {launch.describe()} -> drain_job")
            requests.append(run_request(launch))
        if not launches:
            reasons.append(decision.describe() if len(config.topics) > 1 else decision.summary())
        decisions.append(decision)
    return Tick(tuple(decisions), tuple(requests), tuple(partitions), tuple(reasons))


def with_log_changes(ledger: Ledger, plan):
    """The plan with every log change recorded since the topic's newest batch (its metadata shows them).

    ``decide`` fills the plan's changes with this tick's decisions (what ``kprio plan`` previews); the
    batch records what the ledger holds, which also covers changes of ticks that planned nothing.
    """
    newest = ledger.batches(plan.logical_topic, limit=1)
    since = newest[0].created_at if newest else None
    recent = tuple(e.line() for e in ledger.log_events(plan.logical_topic) if since is None or e.at > since)
    return replace(plan, log_changes=recent) if recent else plan


def _info(log, message: str) -> None:
    if log is not None:
        log.info(message)


def build_priority_lag_sensor(drain_job, interval_s: int) -> dg.SensorDefinition:
    """The sensor, ticking at most every ``interval_s`` seconds, on by default."""

    @dg.sensor(
        name=SENSOR_NAME,
        target=drain_job,
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Watches the lag of every priority topic; heals batches whose run died, retries failed ones, "
        "plans the next batch (rate quotas, burst, budgets, free priority slots), records it in the ledger and "
        "launches drain_job for it. Skips say why nothing was launched and which partitions wait.",
    )
    def priority_lag_sensor(
        context: dg.SensorEvaluationContext,
        kafka: KafkaResource,
        ledger: LedgerResource,
        kprio: KprioSettings,
    ) -> dg.SensorResult:
        result = tick(context.instance, kafka.edge, ledger.ledger, kprio.config(kafka), log=context.log)
        if not result.requests:
            return dg.SensorResult(skip_reason=result.skip_reason)
        return dg.SensorResult(
            run_requests=list(result.requests),
            dynamic_partitions_requests=[batch_partitions.build_add_request(list(result.partitions))]
            if result.partitions else [],
        )

    return priority_lag_sensor


__all__ = ["SENSOR_NAME", "Action", "Tick", "build_priority_lag_sensor", "existing_runs", "run_request", "tick"]
