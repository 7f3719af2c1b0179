"""What ``kprio drain``'s loop reports: one :class:`BatchOutcome` per run it executed, and the :class:`DrainReport`.

An outcome is read from the ledger's batch and the run's own Dagster events, so a run that found its batch's
work done by another run is told apart from one that did it here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import dagster as dg

from kprio_core.ledger import BatchState, Ledger

DRAINED_ASSET = "drained_batch"
COMMITTED_ASSET = "committed_offsets"


@dataclass(frozen=True)
class BatchOutcome:
    """One executed run: its batch, what it drained per priority, where the ledger left the batch; ``own``: False
    when another run did or took its work; ``committed_here``: per priority, records this run committed (its
    batch's, and later batches' that only waited for it)."""

    batch_id: str
    logical_topic: str
    run_id: str
    success: bool
    state: BatchState
    records: dict[int, int]
    dead_letters: int = 0
    reason: str | None = None
    seconds: float = 0.0
    own: bool = True
    committed_here: dict[int, int] | None = None

    def line(self) -> str:
        """One line per run for the operator.

        >>> BatchOutcome("b-000003", "orders", "run-1", True, BatchState.COMMITTED, {0: 7, 2: 29}, 2, None, 1.25).line()
        'b-000003 orders: 36 records [p2=29 p0=7] + 2 dead letters -> committed (1.2 s)'
        >>> BatchOutcome("b-000004", "orders", "run-2", True, BatchState.COMMITTED, {}, seconds=0.3, own=False).line()
        'b-000004 orders: nothing done here: committed by another run (0.3 s)'
        """
        if not self.own:
            return (f"{self.batch_id} {self.logical_topic}: nothing done here: {self.state.value} by another run "
                    f"({self.seconds:.1f} s)")
        by_p = " ".join(f"p{p}={n}" for p, n in sorted(self.records.items(), reverse=True))
        dead = f" + {self.dead_letters} dead letters" if self.dead_letters else ""
        tail = f": {self.reason}" if self.reason and self.state is not BatchState.COMMITTED else ""
        return (f"{self.batch_id} {self.logical_topic}: {sum(self.records.values())} records [{by_p}]{dead} "
                f"-> {self.state.value} ({self.seconds:.1f} s){tail}")

    @property
    def committed(self) -> dict[int, int]:
        """Records this run committed per priority (by default: the batch's, when it ended committed)."""
        if self.committed_here is not None:
            return self.committed_here
        return dict(self.records) if self.own and self.state is BatchState.COMMITTED else {}

    def to_dict(self) -> dict:
        return {"batch_id": self.batch_id, "logical_topic": self.logical_topic, "run_id": self.run_id,
                "success": self.success, "state": self.state.value, "own": self.own,
                "records": {str(p): n for p, n in sorted(self.records.items(), reverse=True)},
                "committed_here": {str(p): n for p, n in sorted(self.committed.items(), reverse=True)},
                "dead_letters": self.dead_letters, "reason": self.reason, "seconds": round(self.seconds, 3)}


@dataclass
class DrainReport:
    """Every run the loop executed, why it stopped, and what still waits for a person."""

    batches: list[BatchOutcome] = field(default_factory=list)
    stopped: str = ""
    ok: bool = True
    held: list[str] = field(default_factory=list)

    def records(self) -> dict[int, int]:
        """Records this process committed per priority (output and dead letters: both were drained)."""
        totals: dict[int, int] = {}
        for b in self.batches:
            for p, n in b.committed.items():
                totals[p] = totals.get(p, 0) + n
        return dict(sorted(totals.items(), reverse=True))


def materialized(instance: dg.DagsterInstance, run_id: str, asset: str) -> set[str]:
    """The batch partitions of ``asset`` the run materialized (outputs and logged events alike)."""
    events = instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)
    return {e.dagster_event.partition for e in events
            if e.dagster_event and e.dagster_event.asset_key and e.dagster_event.asset_key.to_user_string() == asset
            and e.dagster_event.partition}


def outcome_of(ledger: Ledger, batch_id: str, topic: str, instance: dg.DagsterInstance, run_id: str,
               seconds: float) -> BatchOutcome:
    """Where a run left its batch, what the batch drained per priority, and what this run itself did (a success
    that drained and committed nothing is not ``own``: its numbers are another run's)."""
    batch = ledger.batches.get(batch_id)
    run = instance.get_run_by_id(run_id)
    success = run is not None and run.status is dg.DagsterRunStatus.SUCCESS
    drained, committed = materialized(instance, run_id, DRAINED_ASSET), materialized(instance, run_id, COMMITTED_ASSET)
    own = not success or batch_id in drained | committed
    drain = batch.drain if own else None
    here: dict[int, int] = {}
    for b in sorted(committed):
        done = ledger.batches.get(b).drain if b != batch_id else batch.drain
        for p, n in (done.written_by_priority() if done is not None else {}).items():
            here[p] = here.get(p, 0) + n
    return BatchOutcome(
        batch_id=batch.batch_id, logical_topic=topic, run_id=run_id, success=success,
        state=batch.state, records=drain.written_by_priority() if drain is not None else {},
        dead_letters=drain.dead if drain is not None else 0,
        reason=batch.reason or (None if success else first_failure(instance, run_id)), seconds=seconds,
        own=own, committed_here=dict(sorted(here.items(), reverse=True)),
    )


def first_failure(instance: dg.DagsterInstance, run_id: str) -> str:
    """The first line of the run's first step failure (or of what failed the run: a worker that died)."""
    for kind in (dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.ENGINE_EVENT):
        for entry in instance.all_logs(run_id, of_type=kind):
            event = entry.dagster_event
            if event is not None and event.is_step_failure and event.step_failure_data and event.step_failure_data.error:
                return event.step_failure_data.error.message.strip().splitlines()[0]
            said = event.message if event is not None else None
            if kind is dg.DagsterEventType.ENGINE_EVENT and said and said.startswith("kprio: "):
                return said.strip().splitlines()[0]
    return "the run failed"
