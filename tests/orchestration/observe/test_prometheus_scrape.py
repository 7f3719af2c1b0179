"""A real Prometheus server (Debian's package) scrapes ``kprio drain --follow --metrics-port`` while a backlog drains.

The drain runs as a child process (the service as systemd would run it: its own Spark, the session's
broker, a ledger and a Dagster home in tmp_path); the server scrapes it every second; the test reads
only the server's HTTP API: the backlog of every priority falls to zero while the drained-records and
committed-batches counters rise to the backlog's size, the urgent priority's oldest pending record stays
younger than its objective, the phases and produce-to-commit latency are observed, and each priority's
verdict ends OK, and each committed batch's lineage event is counted as emitted. SIGTERM then stops the
drain, exit 0.
"""

from __future__ import annotations

import signal
import time

import pytest
import yaml

from orchestration.services.process import free_port
from tests.fixtures.spark import TEST_SPARK
from tests.orchestration.test_recovery import kill_group, output_of, start

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.slow]

RECORDS = {2: 120, 1: 400, 0: 900}
URGENT_OBJECTIVE_S = 300
DRAIN_TIMEOUT_S = 300


def follow_config(tmp_path, kafka_settings, topic, spark_conf) -> object:
    raw = {
        "kafka": {"bootstrap_servers": kafka_settings.bootstrap_servers, "timeout_s": kafka_settings.timeout_s},
        "topics": [topic.model_dump(mode="json", by_alias=True)],
        "spark": {"master": "local[1]", "conf": {**{k: v for k, v in TEST_SPARK.conf.items()
                                                     if k != "spark.executorEnv.PYTHONPATH"}, **spark_conf}},
        "ledger": {"url": f"sqlite:///{tmp_path / 'ledger.db'}"},
        "drain": {"output_path": str(tmp_path / "output"), "dead_letter_path": str(tmp_path / "dead-letters"),
                  "replay_path": str(tmp_path / "replay")},
        "sensor": {"interval_s": 1},
        "planner": {"record_budget": 500, "target_batch_s": None},
        "slo": {"max_age_s": {2: URGENT_OBJECTIVE_S, 0: 3600}},
        "verdict": {"expected_commit_s": 60},
        "lineage": {"enabled": True, "transport": {"type": "file", "log_file_path": str(tmp_path / "lineage.jsonl"),
                                                   "append": True}},
    }
    (tmp_path / "home").mkdir()
    path = tmp_path / "kprio.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_prometheus_sees_the_backlog_fall_and_the_counters_rise(make_topic, kafka_settings, tmp_path,
                                                                child_spark_conf, prometheus):
    topic = make_topic(priorities=3, partitions=2, records=RECORDS, base_ts_ms=int(time.time() * 1000))
    config = follow_config(tmp_path, kafka_settings, topic, child_spark_conf)
    port = free_port()
    proc = start(config, tmp_path, "--follow", "--metrics-port", str(port))
    try:
        server = prometheus([f"127.0.0.1:{port}"])
        server.wait_until_up(timeout_s=60)
        name = topic.name
        backlog = f'sum(kprio_backlog_records{{topic="{name}"}})'
        drained = f'sum(kprio_records_drained_total{{topic="{name}"}})'
        urgent_age = f'max(kprio_oldest_pending_age_seconds{{topic="{name}",priority="2"}})'
        seen_backlog, seen_drained, urgent_ages = [], [], []
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while True:
            b, d, a = server.value(backlog), server.value(drained), server.value(urgent_age)
            if b is not None:
                seen_backlog.append(b)
            seen_drained.append(d or 0.0)
            if a is not None:
                urgent_ages.append(a)
            if seen_backlog and seen_backlog[-1] == 0 and seen_drained[-1] == sum(RECORDS.values()):
                break
            assert proc.poll() is None, output_of(proc)[-3000:]
            assert time.monotonic() < deadline, (seen_backlog[-5:], seen_drained[-5:], output_of(proc)[-3000:])
            time.sleep(0.5)

        assert max(seen_backlog) > 0, "the server saw a backlog before it was drained"
        assert any(0 < b < max(seen_backlog) for b in seen_backlog) or len(set(seen_backlog)) >= 2
        assert any(0 < d < sum(RECORDS.values()) for d in seen_drained), "the counter rose batch by batch"
        assert seen_drained == sorted(seen_drained), "a counter never falls"
        assert urgent_ages and max(urgent_ages) < URGENT_OBJECTIVE_S

        # Every priority's own numbers, as the server stores them.
        for p, n in RECORDS.items():
            assert server.value(f'kprio_records_drained_total{{topic="{name}",priority="{p}"}}') == n
            assert server.value(f'sum(kprio_backlog_records{{topic="{name}",priority="{p}"}})') == 0
            assert server.value(f'max(kprio_oldest_pending_age_seconds{{topic="{name}",priority="{p}"}})') == 0
        committed = server.value(f'kprio_batches_total{{topic="{name}",outcome="committed"}}')
        assert committed >= 3
        server.wait_for('kprio_lineage_events_total{outcome="emitted"}', lambda v: v == committed, timeout_s=30)
        assert len((tmp_path / "lineage.jsonl").read_text().splitlines()) == committed
        for phase in ("plan", "drain", "checks", "publish", "commit"):
            count = server.value(f'kprio_batch_phase_duration_seconds_count{{topic="{name}",phase="{phase}"}}')
            assert count and count >= 1, phase
        assert server.value(f'sum(kprio_produce_to_commit_latency_seconds_count{{topic="{name}"}})') >= 3
        assert server.value(f'sum(kprio_bytes_drained_total{{topic="{name}"}})') > 0
        server.wait_for(f'sum(kprio_lag_verdict{{topic="{name}",state="OK"}})', lambda v: v == 3, timeout_s=30)
        assert server.value(f'kprio_freshness_status{{topic="{name}",priority="2",status="pass"}}') == 1
        assert server.value(f'kprio_freshness_objective_seconds{{topic="{name}",priority="2"}}') == URGENT_OBJECTIVE_S
        assert server.value(f'kprio_runs_in_flight{{topic="{name}"}}') == 0
        assert server.value('sum(kprio_build_info)') == 1

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, output_of(proc)[-3000:]
    finally:
        kill_group(proc)
