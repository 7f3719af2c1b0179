"""The tick's inputs are read in an order that cannot make a finished run look dead.

Found under the Dagster daemon: a backfill's run re-drained a committed batch, committed it and
ended while the sensor's tick read; the tick had read the ledger (the batch in flight, leased by
that run) before the run store (the run ended), took the run for one that died with its batch in
flight, and launched a needless run to resume it. The runs are now read first: a run writes to the
ledger before it ends.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from kprio_core.lifecycle import (
    BatchRuns,
    CarryOutLogChanges,
    FailDeadRun,
    Launch,
    RunState,
    RunSummary,
    decide_tick,
)
from kprio_core.model.recovery import lease_owner
from orchestration.runtime.runs import NoRuns
from orchestration.runtime.tick import apply, decide, decide_all, gather_all, tick
from tests.orchestration.ledger_states import commit_as_drained

pytestmark = [pytest.mark.broker]

RUN_ID = "0a1b2c3d-run-that-finishes"
OWNER = lease_owner(RUN_ID, host="elsewhere", pid=1)


class FinishesWhenAsked(NoRuns):
    """A run store of one run, ``RUN_ID``: it finishes its batch and ends the moment the tick first asks about it."""

    def __init__(self, finish) -> None:
        self.finish, self.ended = finish, False

    def _end(self) -> None:
        if not self.ended:
            self.finish()
            self.ended = True

    def of(self, batches: Iterable) -> BatchRuns:
        self._end()
        return BatchRuns({b.batch_id: (RunSummary(RUN_ID, RunState.SUCCESS),) for b in batches})

    def owner_dead(self, owner: str) -> bool:
        self._end()
        return owner == OWNER


def test_a_run_that_commits_its_batch_and_ends_while_the_tick_reads_is_not_taken_for_dead(make_topic, kprio_env):
    topic = make_topic(priorities=2, partitions=1, records={0: 30})
    env = kprio_env(topic)
    [order] = tick(NoRuns(), env.edge, env.ledger, env.config).requests  # the batch, recorded
    env.ledger.leases.claim(order.partition_key, OWNER, 60)  # its run took it

    runs = FinishesWhenAsked(lambda: commit_as_drained(env.ledger, order.partition_key, env.edge, topic))
    decision = decide(runs, env.edge, env.ledger, env.config, topic)

    assert runs.ended
    assert not [a for a in decision.actions if isinstance(a, (FailDeadRun, Launch))], decision.actions


def test_a_batch_committed_while_the_tick_reads_another_topic_is_never_planned_again(make_topic, kprio_env):
    """The lag snapshots of every topic are taken together, after every topic's ledger view: a batch of the
    second topic committed while the tick reads the first is committed in the snapshot too. Taken before
    the views, the snapshot showed no committed offset where the ledger believed 30: a false "committed
    offsets gone", restored (checked by moving the snapshots first)."""
    quiet, busy = make_topic(priorities=2, partitions=1), make_topic(priorities=2, partitions=1, records={0: 30})
    env = kprio_env(quiet, busy)
    [order] = tick(NoRuns(), env.edge, env.ledger, env.config).requests  # busy's batch, recorded
    env.ledger.leases.claim(order.partition_key, OWNER, 60)  # its run took it

    runs = FinishesWhenAsked(lambda: commit_as_drained(env.ledger, order.partition_key, env.edge, busy))
    first, second = decide_all(runs, env.edge, env.ledger, env.config, [quiet, busy])

    assert runs.ended
    assert first.plan is None and second.plan is None, (first.summary(), second.summary())
    assert not [a for a in second.actions if isinstance(a, (FailDeadRun, Launch))], second.actions
    # Nor is the committed offset taken for one that vanished (a false "committed offsets gone", restored).
    assert not [d for a in second.actions if isinstance(a, CarryOutLogChanges) for d in a.decided], second.actions


class EndedBeforeTaking(NoRuns):
    """A run store of one run of ``batch_id``, under ``run_key``, that ended (FAILURE) before it took the batch."""

    def __init__(self, batch_id: str, run_key: str) -> None:
        self.summary = {batch_id: (RunSummary(RUN_ID, RunState.FAILURE, run_key=run_key),)}

    def of(self, batches: Iterable) -> BatchRuns:
        return BatchRuns({b.batch_id: self.summary[b.batch_id] for b in batches if b.batch_id in self.summary})


def test_a_batch_a_run_takes_after_the_tick_saw_it_untaken_is_neither_failed_nor_retried(make_topic, kprio_env):
    """The tick saw the batch's run end before it took the batch (rule 1b); before the applier fails it, another run
    takes it (a person's run from the UI, a second driver's): the ledger refuses the failure (fenced by the lease),
    and the applier drops the retry decided on what it saw, and says so, instead of launching a second run."""
    topic = make_topic(priorities=2, partitions=1, records={0: 30})
    env = kprio_env(topic)
    [order] = tick(NoRuns(), env.edge, env.ledger, env.config).requests
    runs = EndedBeforeTaking(order.partition_key, order.run_key)
    [inputs] = gather_all(runs, env.edge, env.ledger, env.config, [topic], now=env.ledger.now())
    decision = decide_tick(env.config, topic, inputs)
    assert [x.attempt for x in decision.untaken] == [1] and [x.attempt for x in decision.launch] == [2], decision

    env.ledger.leases.claim(order.partition_key, OWNER, 60)  # meanwhile a run took it
    applied = apply(runs, env.edge, env.ledger, env.config, topic, decision, inputs)

    assert applied.requests == () and applied.contended, applied
    assert f"{order.partition_key} moved on before this tick could fail it" in applied.reasons[0], applied.reasons
    batch = env.ledger.batches.get(order.partition_key)
    assert (batch.state.value, batch.attempts, batch.lease.owner) == ("planned", 1, OWNER), batch
