"""kprio's metrics (orchestration/observe/metrics.py, endpoint.py): names Prometheus' own linter accepts,
bounded labels, updates from plain values, and an endpoint on loopback that says in one line when it cannot
listen.

``promtool check metrics`` is Debian's prometheus package's linter of the exposition format and of
Prometheus' naming conventions (installed with apt-get when missing, as the Prometheus fixture does).
"""

from __future__ import annotations

import re
import socket
import subprocess
import urllib.request

import pytest

from kprio_core.freshness import Freshness, FreshnessResult, Objective
from kprio_core.verdict import LagState, Observation, PartitionWindow, VerdictPolicy, judge_priority
from orchestration.observe.endpoint import serve_metrics
from orchestration.observe.errors import MetricsListenFailed, MetricsPortInUse
from orchestration.observe.judging import HoldReason
from orchestration.observe.metrics import (
    KprioMetrics,
    LineageOutcome,
    Outcome,
    PartitionBacklog,
    Phase,
)
from tests.fixtures.prometheus import promtool

NAMES_IN_DOCSTRING = re.compile(r"^(kprio_\w+)\s+(gauge|counter|histogram)\s", re.MULTILINE)


def full_metrics() -> KprioMetrics:
    """Every metric with at least one series, as a drain that ran a while has them."""
    m = KprioMetrics(version="0.1.0")
    m.set_backlog("orders", [PartitionBacklog(2, 0, 120, 4.5, 880, 1000), PartitionBacklog(0, 1, 0, None, 40, 40),
                             PartitionBacklog(0, 2, 7, None, None, 7)])
    m.record_drained("orders", 2, records=300, size=60_000, dead_letters=2)
    m.record_batch("orders", Outcome.COMMITTED, {"drain": 1.2, "check": 0.3, "publish": 0.1, "commit": 0.05,
                                                 Phase.PLAN: 0.02, "lease": 0.01})
    m.record_batch("orders", Outcome.FAILED, {"drain": 0.7})
    m.record_commit("orders", 2, at_s=1_700_000_000.0, latency_s=3.2)
    m.set_holds("orders", {(0, HoldReason.FAILED_BATCH): 1})
    m.set_runs_in_flight("orders", 2)
    seen = (Observation(0, 0, 100, commit=True), Observation(30, 80, 200, commit=True), Observation(50, 80, 260))
    m.set_verdicts("orders", [judge_priority(2, [PartitionWindow("orders-2", 0, 2, seen)], now_s=60,
                                             policy=VerdictPolicy(20))])
    m.set_freshness("orders", [FreshnessResult("orders", 2, Freshness.WARN, 50.0, Objective(60), None, "line")])
    m.record_lineage(LineageOutcome.EMITTED)
    return m


def test_promtool_accepts_every_name_and_help():
    text = full_metrics().exposition()
    checked = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True, timeout=60)
    assert checked.returncode == 0, (checked.stdout + checked.stderr).decode()
    assert (checked.stdout + checked.stderr).strip() == b"", "promtool's lint found problems"


def test_the_docstring_table_is_the_registry():
    """The table in the module docstring (docs/operations.md's too) names exactly the metrics there are."""
    import orchestration.observe.metrics as module

    documented = dict(NAMES_IN_DOCSTRING.findall(module.__doc__))
    registered = {}
    for family in full_metrics().registry.collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        registered[name] = family.type
    assert documented == registered
    for name in documented:
        assert name.startswith("kprio_")
    doc = (module.__file__.rsplit("/orchestration/", 1)[0]) + "/docs/operations.md"
    with open(doc) as f:
        page = f.read()
    assert set(re.findall(r"`(kprio_\w+)`", page)) >= set(documented), "docs/operations.md misses a metric"


def test_labels_are_bounded():
    allowed = {"topic", "priority", "partition", "outcome", "phase", "reason", "state", "status", "version", "le"}
    for family in full_metrics().registry.collect():
        for sample in family.samples:
            assert set(sample.labels) <= allowed, (sample.name, sample.labels)
            assert not any(re.fullmatch(r"b-\d+", v) for v in sample.labels.values())


def test_values_from_plain_updates():
    m = full_metrics()
    assert m.value("kprio_backlog_records", topic="orders", priority="2", partition="0") == 120
    assert m.value("kprio_oldest_pending_age_seconds", topic="orders", priority="2", partition="0") == 4.5
    assert m.value("kprio_oldest_pending_age_seconds", topic="orders", priority="0", partition="1") == 0  # none waits
    assert m.value("kprio_oldest_pending_age_seconds", topic="orders", priority="0", partition="2") is None  # unread
    assert m.value("kprio_committed_offset", topic="orders", priority="0", partition="2") is None  # never committed
    assert m.value("kprio_log_end_offset", topic="orders", priority="2", partition="0") == 1000
    assert m.value("kprio_records_drained_total", topic="orders", priority="2") == 300
    assert m.value("kprio_bytes_drained_total", topic="orders", priority="2") == 60_000
    assert m.value("kprio_dead_letters_total", topic="orders", priority="2") == 2
    assert m.value("kprio_batches_total", topic="orders", outcome="committed") == 1
    assert m.value("kprio_batches_total", topic="orders", outcome="failed") == 1
    assert m.value("kprio_batch_phase_duration_seconds_count", topic="orders", phase="drain") == 2
    assert m.value("kprio_batch_phase_duration_seconds_sum", topic="orders", phase="checks") == 0.3
    assert m.value("kprio_batch_phase_duration_seconds_count", topic="orders", phase="plan") == 1
    assert m.value("kprio_produce_to_commit_latency_seconds_bucket", topic="orders", priority="2", le="5.0") == 1
    assert m.value("kprio_last_commit_timestamp_seconds", topic="orders", priority="2") == 1_700_000_000
    assert m.value("kprio_partitions_held", topic="orders", priority="0", reason="failed_batch") == 1
    assert m.value("kprio_runs_in_flight", topic="orders") == 2
    assert m.value("kprio_lag_verdict", topic="orders", priority="2", state="WARN") == 1
    assert sum(m.value("kprio_lag_verdict", topic="orders", priority="2", state=s.value) for s in LagState) == 1
    assert m.value("kprio_partition_lag_verdict", topic="orders", priority="2", partition="0", state="WARN") == 1
    assert m.value("kprio_freshness_objective_seconds", topic="orders", priority="2") == 60
    assert m.value("kprio_freshness_status", topic="orders", priority="2", status="warn") == 1
    assert m.value("kprio_freshness_status", topic="orders", priority="2", status="fail") == 0
    assert m.value("kprio_lineage_events_total", outcome="emitted") == 1
    assert m.value("kprio_build_info", version="0.1.0") == 1


def test_the_present_is_replaced_not_piled_up():
    m = full_metrics()
    m.set_backlog("orders", [PartitionBacklog(2, 0, 0, None, 1000, 1000)])
    assert m.value("kprio_backlog_records", topic="orders", priority="2", partition="0") == 0
    assert m.value("kprio_oldest_pending_age_seconds", topic="orders", priority="2", partition="0") == 0
    assert m.value("kprio_backlog_records", topic="orders", priority="0", partition="1") is None  # gone
    assert m.value("kprio_committed_offset", topic="orders", priority="0", partition="1") is None
    m.set_holds("orders", {})
    assert m.value("kprio_partitions_held", topic="orders", priority="0", reason="failed_batch") is None
    m.set_backlog("payments", [PartitionBacklog(1, 0, 5, 1.0, 0, 5)])  # another topic leaves orders alone
    assert m.value("kprio_backlog_records", topic="orders", priority="2", partition="0") == 0


def test_two_registries_do_not_collide():
    a, b = KprioMetrics(), KprioMetrics()
    a.record_drained("orders", 1, records=5, size=50, dead_letters=0)
    assert b.value("kprio_records_drained_total", topic="orders", priority="1") is None


def test_hold_reasons_of_the_ledger():
    assert HoldReason.of_batch_hold(exhausted=True) is HoldReason.RETRIES_EXHAUSTED
    assert HoldReason.of_batch_hold(exhausted=False) is HoldReason.FAILED_BATCH


# ------------------------------------------------------------------------------------------- the endpoint


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return answer.read().decode()


def test_endpoint_serves_on_loopback_and_stops_cleanly():
    m = full_metrics()
    with serve_metrics(m.registry, port=0) as endpoint:
        assert endpoint.addr == "127.0.0.1"
        assert 'kprio_backlog_records{partition="0",priority="2",topic="orders"} 120.0' in scrape(endpoint.url)
        m.set_backlog("orders", [PartitionBacklog(2, 0, 60, 2.0, 940, 1000)])
        assert 'kprio_backlog_records{partition="0",priority="2",topic="orders"} 60.0' in scrape(endpoint.url)
        port = endpoint.port
    with pytest.raises(OSError):
        scrape(f"http://127.0.0.1:{port}/metrics")
    with serve_metrics(m.registry, port=port):  # the port is free again at once
        pass


def test_port_in_use_is_one_line():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(MetricsPortInUse) as err:
            serve_metrics(KprioMetrics().registry, port=port)
    assert err.value.code == "metrics_port_in_use"
    assert str(err.value) == f"the metrics port {port} on 127.0.0.1 is in use by another process (--metrics-port)"


@pytest.mark.parametrize(("addr", "port", "says"), [
    ("127.0.0.1", 70_000, "must be 0..65535"),
    ("no-such-host.invalid", 0, "is not a host name or address this host knows"),
    ("192.0.2.1", 0, "cannot listen on 192.0.2.1:0"),  # TEST-NET-1: never an address of this host
])
def test_where_it_cannot_listen_is_one_line(addr, port, says):
    with pytest.raises(MetricsListenFailed) as err:
        serve_metrics(KprioMetrics().registry, port=port, addr=addr, where="metrics.addr in kprio.yaml")
    assert err.value.code == "metrics_listen_failed"
    assert says in str(err.value) and str(err.value).endswith("(metrics.addr in kprio.yaml)")
    assert "\n" not in str(err.value)


def test_a_feed_failure_is_said_once_until_it_passes_and_never_raised():
    """The feed's work fails while the broker or the ledger is gone: one line (first line of the error) per spell
    of the same failure of one work, handed to ``on_error``; another work passing in between (the ledger's count
    fails, the broker's refresh passes) does not repeat it; the work passing ends its spell."""
    from kprio_core.config import KprioConfig
    from orchestration.observe.feed import MetricsFeed

    said: list[str] = []
    feed = MetricsFeed(KprioConfig(), KprioMetrics(), on_error=said.append)
    calls: list[tuple] = []

    def fails(*args):
        calls.append(args)
        raise OSError("broker gone\nsecond line")

    for _ in range(2):
        feed._guarded("count a run", fails, "edge", None)
        feed._guarded("refresh", lambda: None)
    assert said == ["metrics: could not count a run: broker gone"]
    feed._guarded("count a run", lambda *args: None, "edge", None)
    feed._guarded("count a run", fails, "edge", None)
    assert calls == [("edge", None)] * 3
    assert said == ["metrics: could not count a run: broker gone"] * 2
