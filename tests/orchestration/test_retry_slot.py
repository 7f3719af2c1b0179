"""A failed batch's retry keeps its priorities' slots from its launch until its run takes the batch (tick rule 4).

A full run once deadlocked here: a tick launched the retry of a failed batch of priority 0; before the retry's run had
taken the batch, the next tick saw it still failed, took priority 0's slot as free and planned a new batch there; the
retry's run, on the only bulk worker, then waited for that batch, which waited for a bulk worker. The interleaving is
forced on a real ``kprio drain --follow``: the warm worker executing the retry is stopped at ``before-take`` (decided
to take the batch, the ledger not told), the drain ticks on meanwhile, and records arrive on priority 1: the plan that
takes them must leave priority 0 alone (three workers, so the bulk lane has a free worker and only the slot rule keeps
priority 0 out). Resumed, the retry takes its batch and the drain converges: zero lag, every record once.
"""

from __future__ import annotations

import signal

import pytest

from kprio_core.ledger import BatchState, Ledger
from kprio_core.model.drain_plan import DrainPlan, PlannedRange
from kprio_core.model.offsets import OffsetRange
from orchestration.services.process import wait_for
from tests.fixtures.kafka import fill
from tests.fixtures.paused import paused, resume
from tests.orchestration.conservation import conservation
from tests.orchestration.test_recovery import (
    CHILD_TIMEOUT_S,
    assert_converges,
    child_config,
    kill_group,
    output_of,
    start,
)

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.slow]

FAILED_END = 50
"""The failed batch's range: priority 0's partition 0, offsets [0, 50)."""


def failed_batch(env, topic) -> str:
    """A batch of priority 0's partition 0 that failed on a cause that passed (transient), its retry due at once: as
    the ledger holds one whose worker lost the broker mid-drain."""
    name = topic.priority_topic(0)
    plan = DrainPlan(topic.name, "lag-aware", 100, None, {0: FAILED_END}, {0: FAILED_END},
                     (PlannedRange(0, OffsetRange(name, 0, 0, FAILED_END)),), topic_ids=env.edge.topic_ids([name]))
    batch = env.ledger.batches.record_plan(plan)
    env.ledger.moves.mark_failed(batch.batch_id, "drain failed: the broker went away (it is back)", retry_at=None,
                                 transient=True)
    return batch.batch_id


def test_a_retry_stopped_before_it_takes_its_batch_keeps_its_slot_and_the_drain_converges(
        make_topic, kprio_env, kafka_settings, tmp_path, spark, child_spark):
    topic = make_topic(priorities=2, partitions=2, records={0: 200}, schema={"i": "long", "amount": "double"})
    env = kprio_env(topic, planner={"record_budget": 100, "target_batch_s": None}, workers={"count": 3},
                    recovery={"lease_s": 60, "backoff_s": 0.2, "backoff_max_s": 1})
    (tmp_path / "home").mkdir()
    config = child_config(env, tmp_path, child_spark)
    retried = failed_batch(env, topic)

    proc = start(config, tmp_path, "--follow", KPRIO_PAUSE_AT=f"before-take:{topic.name}",
                 KPRIO_CRASH_ONCE=str(tmp_path / "paused"))
    try:
        assert wait_for(lambda: paused(proc), CHILD_TIMEOUT_S, interval_s=0.2), output_of(proc)[-2000:]
        stopped = paused(proc)
        with Ledger(env.config.ledger.url) as ledger:
            assert ledger.batches.get(retried).state is BatchState.FAILED, "stopped before the retry took its batch"
            fill(kafka_settings, topic.priority_topic(1), 40, partitions=2)

            def others() -> list:
                return [b for b in ledger.batches.find(topic.name) if b.batch_id != retried]

            # A tick after the stop planned priority 1's records: it saw priority 0 with the retry under way.
            assert wait_for(lambda: any(r.priority == 1 for b in others() for r in b.plan.ranges), CHILD_TIMEOUT_S,
                            interval_s=0.2), output_of(proc)[-3000:]
            taken = [(b.batch_id, str(r.range)) for b in others() for r in b.plan.ranges if r.priority == 0]
            assert taken == [], f"a plan took priority 0's slot while {retried}'s retry was under way: {taken}"
            resume(stopped)
            assert_converges(proc, env, topic, ledger)
            assert ledger.batches.get(retried).state is BatchState.COMMITTED
            assert ledger.batches.get(retried).attempts == 2
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, output_of(proc)[-3000:]
    finally:
        if proc.poll() is None:
            resume(paused(proc))
        kill_group(proc)
    check = conservation(env.config, topic, env.edge)
    assert check.ok, check
