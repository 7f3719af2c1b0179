"""Dagster's runs as the runtime's run store (:class:`orchestration.runtime.runs.Runs`).

A batch's runs are found by their partition tag (``dagster/partition=<batch id>``) whatever
launched them (the sensor, a backfill, the asset page, a retry); a run a killed kprio process
executed in process never ends by itself, so one whose ``kprio/runner`` is gone is *orphaned*.
A :class:`~orchestration.runtime.runs.RunOrder` becomes a ``dg.RunRequest`` here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

import dagster as dg

from kprio_core.ledger import Batch
from kprio_core.lifecycle import BatchRuns, RunState, RunSummary
from orchestration.dagster.partitions import BATCH_PARTITIONS_NAME
from orchestration.dagster.tags import PARTITION_TAG, RUN_KEY_TAG
from orchestration.runtime.leases import owner_dead, parse_owner
from orchestration.runtime.runs import RunOrder
from orchestration.runtime.tags import RUNNER_TAG

RUNS_PER_BATCH = 10
"""Newest runs read per batch (enough to see the active one and the latest outcome)."""
WILL_RETRY_TAG = "dagster/will_retry"
"""Dagster's run-retry daemon sets it to "true" on a failed run it is about to retry."""


def runner_of(run: dg.DagsterRun) -> str | None:
    """The process working on ``run`` (its ``kprio/runner``), None while no kprio process took it.

    Dagster copies tags to retries and re-executions: a runner naming another run, or on a retry a driver
    (``@<host>:<pid>``), is the parent's, so a killed worker's run's retry is not dead with it.
    """
    runner = run.tags.get(RUNNER_TAG)
    owner = parse_owner(runner) if runner else None
    if owner is None:
        return runner
    mine = owner.run_id == run.run_id or (not owner.run_id and run.parent_run_id is None)
    return runner if mine else None


def run_summary(run: dg.DagsterRun, end_time: float | None = None) -> RunSummary:
    """A Dagster run as the rules see it (``end_time``: its record's, in seconds), ``orphaned`` if its runner died."""
    tags = dict(run.tags)
    runner = runner_of(run)
    orphaned = not run.is_finished and runner is not None and owner_dead(runner)
    ended = datetime.fromtimestamp(end_time, UTC) if end_time is not None else None
    return RunSummary(run.run_id, RunState(run.status.value), tags.get(RUN_KEY_TAG), runner,
                      will_retry=tags.get(WILL_RETRY_TAG) == "true", orphaned=orphaned, ended_at=ended)


def run_request(order: RunOrder) -> dg.RunRequest:
    """The runtime's order as Dagster's request (the daemon launches a run key once)."""
    return dg.RunRequest(run_key=order.run_key, partition_key=order.partition_key, tags=dict(order.tags))


class DagsterRuns:
    """The runs of a Dagster instance (see the module docstring)."""

    def __init__(self, instance: dg.DagsterInstance) -> None:
        self.instance = instance

    def of(self, batches: Iterable[Batch]) -> BatchRuns:
        runs = {}
        for batch in batches:
            records = self.instance.get_run_records(filters=dg.RunsFilter(tags={PARTITION_TAG: batch.batch_id}),
                                                    limit=RUNS_PER_BATCH)
            runs[batch.batch_id] = tuple(run_summary(r.dagster_run, r.end_time) for r in records)
        return BatchRuns(runs)

    def run_ended(self, run_id: str) -> bool:
        run = self.instance.get_run_by_id(run_id)
        return run is not None and run.is_finished

    def owner_dead(self, owner: str) -> bool:
        return owner_dead(owner, self.run_ended)

    def fail(self, batch_id: str, run_ids: Sequence[str], why: str) -> list[str]:
        failed = []
        for run_id in run_ids:
            run = self.instance.get_run_by_id(run_id)
            if run is None or run.is_finished:
                continue
            self.instance.report_engine_event(f"kprio: the run of batch {batch_id} died: {why}; a new attempt "
                                              "takes over with the same ranges", run)
            self.instance.report_run_failed(run)
            failed.append(run_id)
        return failed

    def launched(self, run_key: str) -> bool:
        return bool(self.instance.get_run_records(filters=dg.RunsFilter(tags={RUN_KEY_TAG: run_key}), limit=1))

    def batch_ids(self) -> Iterable[str]:
        return self.instance.get_dynamic_partitions(BATCH_PARTITIONS_NAME)

    def missing_partitions(self, keys: Iterable[str]) -> list[str]:
        """Batch partitions not yet in the instance (a batch recorded by another driver a moment ago)."""
        return sorted({k for k in keys if not self.instance.has_dynamic_partition(BATCH_PARTITIONS_NAME, k)})
