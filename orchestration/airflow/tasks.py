"""What the Airflow tasks do, over the shared runtime: plan, drain, commit, re-drain. No rule of their own.

Each function is the body of one task of :mod:`orchestration.airflow.dags`, run in the task's process; it loads
``kprio.yaml`` once for the runtime. :func:`plan_batches` ticks until no new run is requested, so the batches of
every free slot run side by side in one DAG run; :func:`drain_batch` runs
:class:`~orchestration.runtime.batch.BatchRun` up to the publish, :func:`commit_batch` again for the commit.

Airflow 3 tasks reach no metadata database, so the run store is kprio's own ledger
(:class:`~orchestration.runtime.runs.NoRuns`): leases and launch claims say who works on a batch; a lease owner
is gone when its process is gone from this host or its lease expired. An Airflow retry is the orchestrator's
retry of the run (:attr:`~kprio_core.lifecycle.run.Launcher.ORCHESTRATOR_RETRY`): it waits the batch's backoff
out and takes over a dead run (a zombie task) by the same lease rules as under Dagster.

>>> order = RunOrder("b-000007.attempt-2", "b-000007", {"kprio/attempt": "2", "kprio/why": "retry"})
>>> as_xcom(order)["batch_id"], intent_of(as_xcom(order), try_number=1)
('b-000007', Intent(kind=<Launcher.SENSOR: 'sensor'>, attempt=2, why=<LaunchReason.RETRY: 'retry'>))
>>> intent_of(as_xcom(order), try_number=2).kind
<Launcher.ORCHESTRATOR_RETRY: 'orchestrator-retry'>
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kprio_core.config import KprioConfig, load_config
from kprio_core.errors import BatchNotFound
from kprio_core.lifecycle.run import Intent, Launcher, LaunchReason
from kprio_core.model.results import CheckReport
from orchestration.runtime.runs import RunOrder
from orchestration.runtime.tags import ATTEMPT_TAG, TOPIC_TAG, WHY_TAG

if TYPE_CHECKING:
    from spark_jobs.session import SparkProvider

LOG = logging.getLogger("kprio.airflow")

DRIVER = "airflow"
"""The prefix of every lease and launch-claim owner an Airflow task writes (``airflow:<task instance id>``)."""


class TaskFailed(Exception):
    """A task's one-line failure; with ``retry=False`` the DAG raises it as ``AirflowFailException`` (no retry)."""

    def __init__(self, message: str, *, retry: bool = True) -> None:
        super().__init__(message)
        self.retry = retry


@dataclass(frozen=True)
class TaskIdentity:
    """What kprio needs of the Airflow task instance running: its id (the lease owner's run id) and its try."""

    ti_id: str
    try_number: int = 1

    @property
    def run_id(self) -> str:
        return f"{DRIVER}:{self.ti_id}"


# -- plan ------------------------------------------------------------------------------------------


def as_xcom(order: RunOrder) -> dict[str, Any]:
    """A run order as the plan task returns it (JSON, one mapped batch task group each)."""
    return {"batch_id": order.partition_key, "run_key": order.run_key, "topic": order.tags.get(TOPIC_TAG),
            "attempt": int(order.tags.get(ATTEMPT_TAG, "0") or 0) or None, "why": order.tags.get(WHY_TAG)}


def intent_of(order: Mapping[str, Any], try_number: int) -> Intent:
    """Who launched this task's run of the batch: the tick's plan (first try) or Airflow's retry of it."""
    kind = Launcher.SENSOR if try_number <= 1 else Launcher.ORCHESTRATOR_RETRY
    return Intent(kind, order.get("attempt"), LaunchReason.parse(order.get("why")))


@dataclass(frozen=True)
class Planned:
    """The plan task's result: the run orders, and whether a transient cause is seen (kept between DAG runs)."""

    orders: list[dict[str, Any]]
    cause_seen: bool


def plan_batches(config_path: str | None, cause_seen: bool, me: TaskIdentity) -> Planned:
    """Probe, then tick until no new run is requested (at most ``max_in_flight`` x priorities times);
    ``cause_seen``: an earlier DAG run's probe failed (once one passes, transient failures retry at once)."""
    from kprio_core.kafka import KafkaEdge
    from kprio_core.ledger import Ledger
    from orchestration.runtime.healing import cause_seen_after, probe_causes
    from orchestration.runtime.leases import this_owner
    from orchestration.runtime.runs import NoRuns
    from orchestration.runtime.tick import tick

    config = task_config(config_path)
    driver = this_owner(me.run_id)
    turns = config.planner.max_in_flight * max((t.priorities for t in config.topics), default=1)
    orders: dict[str, dict[str, Any]] = {}  # by run key: a later tick asks again for the runs it still sees launchable
    with Ledger.from_settings(config.ledger) as ledger, contextlib.closing(KafkaEdge(config.kafka)) as edge:
        probed = probe_causes(ledger, config, cause_seen)
        if probed.problem:
            LOG.info(f"transient failures wait: {probed.problem}")
        elif probed.passed:
            LOG.info("the cause of the transient failures passed: retrying them now, not at their backoff")
        seen = cause_seen
        for turn in range(turns):
            done = tick(NoRuns(), edge, ledger, config, log=LOG, driver=driver, fresh_start=turn == 0 and probed.passed,
                        cause=probed.problem)
            for plan in (p for d in done.decisions for p in d.plans if p.due):  # slo.max_age_s steered the plan
                LOG.info(f"{plan.logical_topic}: planned by the objectives: {plan.due_line()}")
            if turn == 0:
                seen = cause_seen_after(cause_seen, probed, done)
            new = {r.run_key: as_xcom(r) for r in done.requests if r.run_key not in orders}
            if not new:
                if not orders:
                    LOG.info(f"nothing to launch: {done.skip_reason}")
                break
            orders.update(new)
    LOG.info(f"{len(orders)} batch(es) to run: {', '.join(o['batch_id'] for o in orders.values()) or 'none'}")
    return Planned(list(orders.values()), seen)


# -- the batch's run -------------------------------------------------------------------------------


def drain_batch(config_path: str | None, order: Mapping[str, Any], me: TaskIdentity) -> dict[str, Any]:
    """Take, drain, isolate, check and publish the batch (no commit); its checks and numbers (XCom)."""
    return _run(config_path, order["batch_id"], intent_of(order, me.try_number), me, commit=False)


def commit_batch(config_path: str | None, order: Mapping[str, Any], me: TaskIdentity) -> dict[str, Any]:
    """Commit the published batch's offsets (and later batches that waited for it); what was committed."""
    return _run(config_path, order["batch_id"], intent_of(order, me.try_number), me, commit=True)


def redrain_batch(config_path: str | None, batch_id: object, me: TaskIdentity) -> dict[str, Any]:
    """An operator's run of ``batch_id``: re-drain its exact ranges once; a committed batch commits nothing new."""
    if not isinstance(batch_id, str) or not batch_id.strip():
        raise TaskFailed('kprio_redrain needs the batch to re-drain: trigger it with the conf {"batch": "b-000042"} '
                         "(kprio's batch ids: kprio lag, the ledger, a drain task's XCom)", retry=False)
    return _run(config_path, batch_id.strip(), Intent(Launcher.OPERATOR), me, commit=True)


def replay(config_path: str | None, conf: Mapping[str, Any], me: TaskIdentity) -> dict[str, Any]:
    """Drain the window ``conf`` names (``start``, ``end`` = start + 1 h) of every topic into the replay output."""
    from kprio_core.kafka import KafkaEdge
    from orchestration.runtime.replay import ReplayFailed, replay_window, window_id

    start, end = replay_window_of(conf)
    config = task_config(config_path)
    replay_id = window_id(start, end)
    with _lazy(lambda: KafkaEdge(config.kafka)) as edge, _spark(config) as spark:
        try:
            done = replay_window(config, spark.session(), edge(), int(start.timestamp() * 1000),
                                 int(end.timestamp() * 1000), replay_id)
        except ReplayFailed as failed:
            raise TaskFailed(f"replay of {replay_id} failed: {failed}") from None
    checks = checks_xcom(done.report)
    for name, outcome in checks.items():
        LOG.info(f"check {name}: {'passed' if outcome['passed'] else 'FAILED'} {outcome['description']}")
    if done.failures:
        raise TaskFailed(f"replay of {replay_id} failed its checks; nothing of {', '.join(done.failures)} was "
                         "published: " + "; ".join(f"{name}: {why}" for name, why in done.failures.items()),
                         retry=False)
    return {"window": replay_id, "start": start.isoformat(), "end": end.isoformat(), "checks": checks,
            "records": {f"p{p}": n for p, n in sorted(done.records.items(), reverse=True)},
            "records_by_topic": done.by_topic, "dead_letters": done.dead_letters,
            "output": config.drain.replay_path}


def check_freshness(config_path: str | None, me: TaskIdentity) -> dict[str, Any]:
    """Every priority's freshness objective (``slo.max_age_s``) and lag verdict, per topic and priority (the XCom);
    a missed objective fails the task (no retry: the next run looks again) naming each priority, its age, objective
    and likely cause; a warning is only logged (Airflow has no warning state)."""
    import time

    from kprio_core.freshness import Freshness
    from kprio_core.kafka import KafkaEdge
    from kprio_core.ledger import Ledger, ledger_exists
    from orchestration.observe.judging import judge_topic

    config = task_config(config_path)
    now_s = time.time()
    out: dict[str, Any] = {}
    failed: list[str] = []
    opened = Ledger.from_settings(config.ledger) if ledger_exists(config.ledger.url) else contextlib.nullcontext()
    with opened as ledger, contextlib.closing(KafkaEdge(config.kafka)) as edge:
        for topic in config.topics:
            known = {b.topic for b in ledger.beliefs.of(topic.name).values()} if ledger is not None else set()
            snap = edge.snapshot(topic, now_ms=int(now_s * 1000), avg_record_bytes={}, with_age=True,
                                 deleted_ok=known)
            judged = judge_topic(config, topic, snap, ledger, now_s=now_s)
            doc: dict[str, Any] = {}
            for v in judged.verdicts:
                doc[str(v.priority)] = {"backlog": v.lag, "verdict": v.state.value, "verdict_reason": v.reason}
            for r in judged.freshness:
                doc.setdefault(str(r.priority), {})["freshness"] = {
                    "status": r.status.value, "age_s": r.age_s, "objective_s": r.objective.max_age_s, "line": r.line}
                if r.status is Freshness.FAIL:
                    failed.append(r.line)
                elif r.status is Freshness.WARN:
                    LOG.warning(r.line)
            out[topic.name] = doc
    if failed:
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        for line in failed[1:]:
            LOG.error(line)
        raise TaskFailed(f"freshness objective missed: {failed[0]}{more}", retry=False)
    return out


def maintain_tables(config_path: str | None, me: TaskIdentity) -> dict[str, Any]:
    """Maintain every logical topic's tables; the figures before and after, per table and in total (the XCom)."""
    from kprio_core.errors import KprioError
    from orchestration.runtime.maintenance import maintain_tables as maintain

    del me
    config = task_config(config_path)
    try:
        report = maintain(config)
    except KprioError as err:
        raise TaskFailed(str(err)) from None
    for line in report.lines():
        LOG.info(line)
    return _plain(report.to_dict())


def replay_window_of(conf: Mapping[str, Any]) -> tuple[datetime, datetime]:
    """The UTC window a replay's conf names; a conf without a valid one fails the task with one line.

    >>> replay_window_of({"start": "2023-11-14T23:00:00Z"})[1].isoformat()
    '2023-11-15T00:00:00+00:00'
    >>> replay_window_of({"start": "2023-11-14T23:00", "end": "2023-11-14T22:00"})
    Traceback (most recent call last):
    ...
    orchestration.airflow.tasks.TaskFailed: kprio_replay: the window's end 2023-11-14T22:00:00+00:00 is not after its start 2023-11-14T23:00:00+00:00
    """
    usage = ('kprio_replay needs the window to replay: trigger it with the conf {"start": "2026-11-26T04:00:00Z"} '
             '(and "end", one hour later unless given; times in UTC unless they say otherwise)')
    try:
        start = _utc(conf["start"])
        end = _utc(conf["end"]) if conf.get("end") else start + timedelta(hours=1)
    except (KeyError, TypeError, ValueError) as err:
        raise TaskFailed(f"{usage}: {err!r} in {dict(conf)}", retry=False) from None
    if end <= start:
        raise TaskFailed(f"kprio_replay: the window's end {end.isoformat()} is not after its start "
                         f"{start.isoformat()}", retry=False)
    return start, end


def _utc(text: object) -> datetime:
    moment = datetime.fromisoformat(str(text))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _run(config_path: str | None, batch_id: str, intent: Intent, me: TaskIdentity, *, commit: bool) -> dict[str, Any]:
    from kprio_core.kafka import KafkaEdge
    from kprio_core.ledger import Ledger
    from orchestration.runtime.batch import BatchRun, Checked, Committed, Drained, RunFailed
    from orchestration.runtime.runs import NoRuns

    config = task_config(config_path)
    result: dict[str, Any] = {"batch_id": batch_id}
    with Ledger.from_settings(config.ledger) as ledger, _lazy(lambda: KafkaEdge(config.kafka)) as edge, \
            _spark(config) as spark:
        run = BatchRun(batch_id=batch_id, intent=intent, run_id=me.run_id, ledger=ledger, config=config,
                       spark=spark.session, edge=edge, owner_dead=NoRuns().owner_dead,
                       add_batch=lambda split: LOG.info(f"{split} split off"), log=LOG)
        try:
            for event in run.events(commit=commit):
                if isinstance(event, Checked):
                    result["checks"] = checks_xcom(event.report)
                    for name, outcome in result["checks"].items():
                        LOG.info(f"check {name}: {'passed' if outcome['passed'] else 'FAILED'} "
                                 f"{outcome['description']}")
                elif isinstance(event, Drained):
                    result["drained"] = _plain(event.metadata)
                elif isinstance(event, Committed):
                    result.setdefault("committed", {})[event.batch_id] = _plain(event.metadata)
                    LOG.info(f"{event.batch_id} committed" + (f" ({event.note})" if event.note else ""))
        except RunFailed as failed:
            raise TaskFailed(str(failed)) from failed.__cause__
        except BatchNotFound:
            raise TaskFailed(f"{batch_id} is not a batch of {ledger!r}: name one the drain DAG recorded "
                             "(kprio lag, a plan task's XCom)", retry=False) from None
        result["state"] = ledger.batches.get(batch_id).state.value
    return result


def checks_xcom(report: CheckReport) -> dict[str, dict[str, Any]]:
    """The blocking checks' verdicts by name: passed, numbers, where it failed (the task's XCom)."""
    return {o.name: {"passed": o.passed, "metadata": _plain(o.metadata),
                     "failed_ranges": [str(r) for r in o.failed_ranges],
                     "description": "" if o.passed else o.failure()} for o in report.outcomes}


# -- resources of a task ---------------------------------------------------------------------------


def task_config(config_path: str | None) -> KprioConfig:
    """The configuration a task (or the trigger) loads, once, from the DAG file's path and its environment."""
    return load_config(config_path, env=os.environ)


@contextlib.contextmanager
def _lazy(make: Callable[[], Any]) -> Iterator[Callable[[], Any]]:
    """A getter that makes the thing on first use, closed on exit when it was made."""
    made: list[Any] = []

    def get() -> Any:
        if not made:
            made.append(make())
        return made[0]

    try:
        yield get
    finally:
        for thing in made:
            thing.close()


@contextlib.contextmanager
def _spark(config: KprioConfig) -> Iterator[SparkProvider]:
    """The task's Spark provider: started on first use (an active session, as under ``dag.test()``, is reused and
    left running), stopped on exit when the task started it."""
    from spark_jobs.session import SparkProvider

    spark = SparkProvider(config.spark, app_name="kprio-airflow")
    try:
        yield spark
    finally:
        spark.stop()


def _plain(values: Mapping[str, Any]) -> dict[str, Any]:
    """JSON values only (an XCom): paths and Markdown as their text."""
    return json.loads(json.dumps(dict(values), default=str))


def config_file(path: str | os.PathLike | None) -> str | None:
    """The absolute path a task process loads (its working directory is the worker's, not the DAG file's)."""
    from kprio_core.config import config_path

    chosen = config_path(path)
    return str(Path(chosen).resolve()) if chosen is not None else None
