"""``kprio broker start|stop|status`` and ``kprio lag``: real broker, exact numbers, clean failures."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from typer.testing import CliRunner

from kprio_core.kafka import KafkaEdge
from kprio_core.model.offsets import OffsetRange as R
from orchestration.cli.main import app
from orchestration.services.process import free_port, pid_alive
from tests.fixtures.kafka import BASE_TS_MS

runner = CliRunner()


def run(*args: str):  # noqa: ANN201
    return runner.invoke(app, list(args))


def write_config(path, bootstrap: str, *topics, timeout_s: float = 20.0):  # noqa: ANN001, ANN201
    doc = {
        "kafka": {"bootstrap_servers": bootstrap, "timeout_s": timeout_s},
        "topics": [{"name": t.name, "priorities": t.priorities, "partitions": t.partitions} for t in topics],
    }
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(autouse=True)
def no_env_bootstrap(monkeypatch):
    # The config file under test names the cluster; an exported override must not replace it.
    monkeypatch.delenv("KPRIO_BOOTSTRAP_SERVERS", raising=False)


@pytest.mark.broker
@pytest.mark.slow
def test_broker_start_status_stop(tmp_path):
    data_dir = str(tmp_path / "broker")
    port = free_port()
    try:
        started = run("broker", "start", "--port", str(port), "--data-dir", data_dir, "--json")
        assert started.exit_code == 0, started.output
        doc = json.loads(started.stdout)
        assert doc["running"] and doc["bootstrap"] == f"127.0.0.1:{port}"
        status = json.loads(run("broker", "status", "--data-dir", data_dir, "--json").stdout)
        assert status["pid"] == doc["pid"]
        again = run("broker", "start", "--port", str(port), "--data-dir", data_dir, "--json")
        assert json.loads(again.stdout)["pid"] == doc["pid"], "a second start reuses the running broker"
    finally:
        stopped = run("broker", "stop", "--data-dir", data_dir)
    assert stopped.exit_code == 0 and "stopped" in stopped.stdout
    assert not pid_alive(doc["pid"])
    assert "stopped" in run("broker", "status", "--data-dir", data_dir).stdout
    assert "no embedded broker running" in run("broker", "stop", "--data-dir", data_dir).stdout


@pytest.mark.broker
def test_lag_json_per_priority_and_partition(make_topic, kafka_settings, tmp_path):
    topic = make_topic(priorities=2, partitions=2, records={1: 5})
    t1 = topic.priority_topic(1)
    with KafkaEdge(kafka_settings) as edge:
        edge.commit(topic, [R(t1, 0, 0, 1)])
    config = write_config(tmp_path / "kprio.yaml", kafka_settings.bootstrap_servers, topic)
    before_ms = int(time.time() * 1000)
    result = run("lag", "--config", str(config), "--topic", topic.name, "--json")
    after_ms = int(time.time() * 1000)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["topic"] == topic.name and list(doc["priorities"]) == ["1", "0"]
    p1 = doc["priorities"]["1"]
    # Round-robin: partition 0 holds offsets stamped +0, +2, +4 s; partition 1 +1, +3 s.
    assert p1["backlog"] == 2 + 2
    oldest = BASE_TS_MS + 1_000  # partition 1 from offset 0; partition 0 from offset 1 (+2 s)
    assert (before_ms - oldest) / 1000 <= p1["oldest_age_s"] <= (after_ms - oldest) / 1000
    rows = [{k: v for k, v in part.items() if k != "oldest_age_s"} for part in p1["partitions"]]
    assert rows == [
        {"partition": 0, "topic": t1, "log_start": 0, "high_watermark": 3, "last_stable_offset": 3, "committed": 1,
         "backlog": 2, "behind_open_transaction": 0, "open_transaction_age_s": None, "lost_to_retention": 0,
         "state": "ok", "decision": None, "text": None,
         "verdict": "OK", "verdict_reason": f"{t1}[0]: draining, 2 records waiting"},
        {"partition": 1, "topic": t1, "log_start": 0, "high_watermark": 2, "last_stable_offset": 2,
         "committed": None, "backlog": 2, "behind_open_transaction": 0, "open_transaction_age_s": None,
         "lost_to_retention": 0, "state": "ok", "decision": None, "text": None,
         "verdict": "OK", "verdict_reason": f"{t1}[1]: draining, 2 records waiting"},
    ]
    # No ledger, no commits seen: nobody can say it is stuck yet (Burrow's minimum span of a window).
    assert p1["verdict"] == {"state": "OK", "reason": "2 partitions OK, 4 records waiting"}
    assert "freshness" not in p1, "no slo.max_age_s, no objective"
    assert doc["deleted"] == []
    assert p1["behind_open_transactions"] == 0
    assert doc["priorities"]["0"]["backlog"] == 0 and doc["priorities"]["0"]["oldest_age_s"] is None


@pytest.mark.broker
def test_lag_table_shows_none_for_nothing_committed(make_topic, kafka_settings, tmp_path):
    topic = make_topic(priorities=1, partitions=1, records={0: 3})
    config = write_config(tmp_path / "kprio.yaml", kafka_settings.bootstrap_servers, topic)
    result = runner.invoke(app, ["lag", "--config", str(config), "--no-age"], terminal_width=160)
    assert result.exit_code == 0, result.output
    assert f"lag of {topic.name}" in result.stdout
    row = next(line for line in result.stdout.splitlines() if line.startswith("│") and "none" in line)
    assert [cell.strip() for cell in row.strip("│ ").split("│")][:6] == ["0", "0", "0", "3", "none", "3"]


@pytest.mark.broker
def test_lag_of_several_topics_is_a_list(make_topic, kafka_settings, tmp_path):
    first, second = make_topic(priorities=1, partitions=1, records={0: 2}), make_topic(priorities=2, partitions=1)
    config = write_config(tmp_path / "kprio.yaml", kafka_settings.bootstrap_servers, first, second)
    docs = json.loads(run("lag", "--config", str(config), "--json").stdout)
    assert [(d["topic"], d["priorities"]["0"]["backlog"]) for d in docs] == [(first.name, 2), (second.name, 0)]


@pytest.mark.broker
def test_lag_of_a_missing_topic_is_one_line(kafka_settings, tmp_path):
    from kprio_core.config import TopicSettings

    config = write_config(tmp_path / "kprio.yaml", kafka_settings.bootstrap_servers,
                          TopicSettings(name="never-created-topic", priorities=1))
    result = run("lag", "--config", str(config))
    assert result.exit_code == 1
    assert "topic 'never-created-topic-0' does not exist" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_lag_with_unreachable_broker_is_one_line_within_the_timeout(tmp_path):
    from kprio_core.config import TopicSettings

    bootstrap = f"127.0.0.1:{free_port()}"
    config = write_config(tmp_path / "kprio.yaml", bootstrap, TopicSettings(name="orders"), timeout_s=1.5)
    started = time.monotonic()
    result = run("lag", "--config", str(config), "--json")
    assert time.monotonic() - started < 1.5 + 2.0
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and bootstrap in lines[0] and "broker_unreachable" in lines[0]


def test_lag_of_an_unknown_logical_topic_is_a_usage_error(tmp_path):
    from kprio_core.config import TopicSettings

    config = write_config(tmp_path / "kprio.yaml", "127.0.0.1:1", TopicSettings(name="orders"))
    result = run("lag", "--config", str(config), "--topic", "nope")
    assert result.exit_code == 2 and "no logical topic named 'nope'" in result.stderr  # --topic is the mistake
    assert result.stderr.strip().endswith("(--topic) [usage]")


@pytest.mark.parametrize("command", [["lag"], ["broker", "start"], ["broker", "stop"], ["broker", "status"]])
def test_help_has_an_example(command):
    result = run(*command, "--help")
    assert result.exit_code == 0 and "Example: kprio" in result.stdout



def test_ctrl_c_ends_a_command_with_one_line_and_exit_130(tmp_path):
    """Ctrl-C (SIGINT) in a command that does not handle it itself (``kprio plan`` waiting for a broker that does
    not answer): the one-line contract, exit 130. SIGINT is sent once the command logged its first line (it is
    past its start, in its wait), not after a sleep."""
    config = tmp_path / "kprio.yaml"
    config.write_text(yaml.safe_dump({"kafka": {"bootstrap_servers": "127.0.0.1:1", "timeout_s": 120},
                                      "topics": [{"name": "orders", "priorities": 1, "partitions": 1}],
                                      "ledger": {"url": f"sqlite:///{tmp_path / 'ledger.db'}"}}))
    proc = subprocess.Popen([sys.executable, "-m", "orchestration.cli", "--verbose", "plan", "--config", str(config)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            env={k: v for k, v in os.environ.items() if k != "KPRIO_BOOTSTRAP_SERVERS"})
    try:
        assert proc.stderr.readline(), "the command logged its first line"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "kprio: error: interrupted (kprio plan) [interrupted]", err
    assert "Traceback" not in err, err
