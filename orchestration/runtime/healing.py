"""A transient hold heals when its cause passes: the cheap probe every driver runs before a tick.

A batch that failed for a transient cause (a full disk, a read-only mount, a silent broker) is retried by itself,
never by a person. Before each tick a driver probes what such a batch needs (:func:`probe_causes`: the output
directories take a small block and, on a local disk, have room for it; the schema registry answers; the broker's
answer is the tick's own snapshot). The tick's rules (``retry_failed`` in :mod:`kprio_core.lifecycle.tick`) then:

- never retry a transient failure while a probe sees a cause (it would fail alike, using up time, not attempts);
- retry the first failure of a streak as soon as the probes pass (due at once:
  :func:`kprio_core.lifecycle.run.retry_at`), so a batch waits no longer than its outage did;
- back the later failures of a streak off from ``recovery.backoff_s`` (a cause no probe sees is never retried in
  a loop), except on the first tick after a failed probe passes again: then at once (``fresh_start``, as a newly
  started ``kprio drain``).

Between ticks a driver keeps one bit, "a cause was seen" (:func:`cause_seen_after`): ``kprio drain`` in its loop,
the Dagster sensor in its cursor (:data:`CAUSE_SEEN`), Airflow's plan task in a Variable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kprio_core.config import KprioConfig
from kprio_core.errors import BrokerUnreachable
from kprio_core.ledger import Batch, BatchState
from orchestration.runtime.ports import LedgerPort
from orchestration.runtime.tick import Tick

CAUSE_SEEN = "cause-seen"
"""The sensor's cursor while a probe failed since its last early retry."""


@dataclass(frozen=True)
class Probed:
    """What the probe before a tick found."""

    problem: str | None
    """What keeps the outputs from taking the waiting batches (None: nothing does, or nothing was probed)."""
    passed: bool
    """A cause seen before is gone: the tick retries transient failures at once."""


def probe_causes(ledger: LedgerPort, config: KprioConfig, cause_seen: bool) -> Probed:
    """Probe the output roots for the batches that wait for a passing cause (nothing waits, nothing seen: no write);
    proven on real mounts by ``tests/orchestration/test_transient.py``."""
    from spark_jobs.output import probe  # pyarrow's file systems: imported when there is something to probe
    from spark_jobs.tables import output_of

    waiting = [b for b in ledger.batches.find(states=[BatchState.FAILED]) if b.transient]
    if not cause_seen and not waiting:
        return Probed(None, passed=False)
    need = max((sum(r.est_bytes for r in b.plan.ranges) for b in waiting), default=0)
    roots = (config.drain.output_path, config.drain.dead_letter_path)
    problem = probe(probed_dirs(roots, waiting, output_of(config.drain).data_dir), need_bytes=need) or probe_registry(
        config, {b.logical_topic for b in waiting})
    return Probed(problem, passed=cause_seen and problem is None)


def probe_registry(config: KprioConfig, topics: set[str]) -> str | None:
    """What keeps the schema registry from serving the waiting topics that read through it (None: it answers, or
    none does): one request, bounded by ``schema_registry.timeout_s``; a refusal (login, permission) is no passing
    cause, not reported here."""
    from kprio_core.errors import KprioError, SchemaRegistryUnavailable

    needs = [t for t in config.topics if t.name in topics and (t.value_format.registry_type or
                                                                 t.key_format.registry_type)]
    if not needs or config.schema_registry is None:
        return None
    from kprio_core.values.registry import SchemaRegistry

    registry = SchemaRegistry(config.schema_registry.endpoint())
    try:
        registry.has_subject("_kprio_probe")
    except SchemaRegistryUnavailable as err:
        return f"the schema registry does not answer: {err}"
    except KprioError:
        return None
    finally:
        registry.close()
    return None


def probed_dirs(roots: Sequence[str], waiting: Sequence[Batch], data_dir: str) -> list[str]:
    """The roots and every directory below them the waiting batches write into (staging, each logical topic, each
    priority's directory below the format's ``data_dir``): a mount or a ``chmod`` may cover one only, and a cause in
    a directory not probed passes unseen (the retry fails alike, the next waits out the streak's backoff).

    >>> from kprio_core.lifecycle.examples import batch
    >>> probed_dirs(["/o"], [batch("b-000004")], "")
    ['/o', '/o/_staging', '/o/orders', '/o/orders/priority=2']
    >>> probed_dirs(["/o"], [batch("b-000004")], "data")[-1]
    '/o/orders/data/priority=2'
    """
    from spark_jobs.layout import STAGING

    data = f"/{data_dir}" if data_dir else ""
    dirs = []
    for root in (r.rstrip("/") for r in roots):
        dirs += [root, f"{root}/{STAGING}"]
        for t in sorted({b.logical_topic for b in waiting}):
            priorities = sorted({p for b in waiting if b.logical_topic == t for p in b.priorities}, reverse=True)
            dirs += [f"{root}/{t}", *(f"{root}/{t}{data}/priority={p}" for p in priorities)]
    return list(dict.fromkeys(dirs))


def cause_seen_after(cause_seen: bool, probed: Probed, turn: Tick) -> bool:
    """Whether a cause is still seen after ``turn``: it was and did not pass, the probe failed, or the broker is silent.

    >>> from orchestration.runtime.tick import Tick
    >>> calm = Tick(decisions=(), requests=(), partitions=(), reasons=())
    >>> cause_seen_after(True, Probed(None, passed=True), calm), cause_seen_after(False, Probed("full", False), calm)
    (False, True)
    """
    return ((cause_seen and not probed.passed) or probed.problem is not None
            or any(isinstance(d.error, BrokerUnreachable) for d in turn.decisions))
