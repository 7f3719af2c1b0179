"""``kprio dead-letters`` on a really drained topic: poison records quarantined by a real drain, then shown.

Real broker, real Spark, a real Dagster instance: priority 0 gets one record of each kind of
poison among good ones on two partitions, priority 2 a few good records; one drain commits them
all and the poison lands in the dead letters. The command reads them back (pyarrow, no Spark)
as a table and as JSON, for the topic and for one batch.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kprio_core.ledger import BatchState
from orchestration.cli.main import app
from orchestration.dagster import drain_loop
from tests.fixtures.kafka import BASE_TS_MS
from tests.orchestration.conservation import conservation

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.slow]

SCHEMA = {"i": "long", "amount": "double"}
GOOD_PER_PARTITION = 6
POISON = {
    # (partition, offset): (key, raw value, a word of the error)
    (0, 3): (b"bad-json", b"not json at all", "not JSON"),
    (0, 4): (b"bad-utf8", b"\xff\xfe\xfd not utf-8", "not JSON"),
    (0, 5): (b"bad-list", b'["a", "b"]', "JSON list"),
    (1, 3): (b"bad-type", b'{"i": "seven", "amount": 1.5}', "field 'i'"),
    (1, 4): (b"bad-missing", b'{"amount": 2.5}', "required field 'i'"),
}


def records_of_priority_0() -> list[tuple]:
    """Per partition: 3 good records, the partition's poison, 3 more good ones (so the offsets above hold)."""
    out = []
    for partition in (0, 1):
        bad = sorted((o, v) for (q, o), v in POISON.items() if q == partition)
        good = [(f"k{partition}-{i}", json.dumps({"i": i, "amount": i * 1.5}), BASE_TS_MS + i, partition)
                for i in range(GOOD_PER_PARTITION)]
        out += good[:3] + [(key, value, BASE_TS_MS, partition) for _, (key, value, _) in bad] + good[3:]
    return out


@pytest.fixture
def drained(make_topic, kprio_env, dagster_instance, tmp_path: Path):
    """A topic drained to zero lag with its poison in the dead letters; (env, topic, batch id, config file)."""
    topic = make_topic(priorities=3, partitions=2, records={0: records_of_priority_0(), 2: 4}, schema=SCHEMA,
                       required_fields=("i",))
    env = kprio_env(topic, planner={"record_budget": 500, "target_batch_s": None})
    report = drain_loop.drain(env.defs, dagster_instance)
    assert report.ok and [b.state for b in report.batches] == [BatchState.COMMITTED], report
    assert report.batches[0].dead_letters == len(POISON)
    check = conservation(env.config, topic, env.edge)
    assert check.ok and check.dead_letters == len(POISON), check
    config_file = tmp_path / "kprio.yaml"
    config_file.write_text(json.dumps(env.config.model_dump(mode="json", by_alias=True,
                                                            exclude={"kafka": {"secrets"}})))
    return env, topic, report.batches[0].batch_id, config_file


def run(*args: str) -> object:
    # A wide terminal so the table's cells are not folded.
    return CliRunner(env={"COLUMNS": "250"}).invoke(app, ["dead-letters", *args], catch_exceptions=False)


def test_json_gives_every_field_and_the_raw_bytes(drained) -> None:
    env, topic, batch_id, config_file = drained
    result = run("--config", str(config_file), "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["topics"] == [topic.name] and doc["total"] == doc["shown"] == len(POISON)
    assert doc["root"] == env.config.drain.dead_letter_path
    p0 = topic.priority_topic(0)
    letters = doc["dead_letters"]
    assert [(d["topic"], d["partition"], d["offset"]) for d in letters] == [(p0, q, o) for q, o in sorted(POISON)]
    for d in letters:
        key, value, word = POISON[(d["partition"], d["offset"])]
        assert d["logical_topic"] == topic.name and d["batch_id"] == batch_id and d["priority"] == 0
        assert d["key"] == key.decode() and base64.b64decode(d["key_raw"]["base64"]) == key
        assert base64.b64decode(d["value"]["base64"]) == value, d
        assert word in d["error"], d
        assert isinstance(d["lane"], int) and d["timestamp"].startswith("2023-11-14T")
        assert d["headers"] == []
    texts = {d["offset"] + 10 * d["partition"]: d["value"]["text"] for d in letters}
    assert texts[4] is None  # not UTF-8: base64 only
    assert texts[5] == '["a", "b"]'


def test_the_table_shows_where_why_and_the_first_bytes_safely(drained) -> None:
    _, topic, batch_id, config_file = drained
    result = run("--config", str(config_file))
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert f"dead letters of {topic.name}: 5" in out
    p0 = topic.priority_topic(0)
    for (partition, offset), (key, _, word) in POISON.items():
        line = next((line for line in out.splitlines() if f"{p0}[{partition}]@{offset}" in line), None)
        assert line is not None, (partition, offset, out)
        assert batch_id in line and key.decode() in line and word in line, line
    assert "\\xff\\xfe\\xfd not utf-8" in out  # raw bytes escaped, not sent to the terminal
    assert '["a", "b"]' in out  # a JSON list is data, not rich markup


def test_one_batch_a_limit_and_nothing_to_show(drained, tmp_path: Path) -> None:
    env, topic, batch_id, config_file = drained
    one = json.loads(run("--config", str(config_file), "--batch", batch_id, "--json").stdout)
    assert one["batch_id"] == batch_id and one["total"] == 5

    limited = run("--config", str(config_file), "--limit", "2")
    assert limited.exit_code == 0 and "showing 2 of 5" in limited.stdout
    assert len(json.loads(run("--config", str(config_file), "--limit", "2", "--json").stdout)["dead_letters"]) == 2

    # A batch the ledger does not know is an error, not "no dead letters" (it was once: exit 0).
    other = run("--config", str(config_file), "--batch", "b-999999")
    assert other.exit_code == 1 and other.stdout == "", other.output
    assert other.stderr.strip().splitlines() == [
        f"kprio: error: the ledger has no batch b-999999 (ledger.url {env.config.ledger.url}) [batch_not_found]"]

    clean = tmp_path / "clean.yaml"
    raw = json.loads(config_file.read_text())
    raw["drain"]["dead_letter_path"] = str(tmp_path / "no-dead-letters")
    clean.write_text(json.dumps(raw))
    empty = run("--config", str(clean))
    assert empty.exit_code == 0 and empty.stdout.strip().splitlines() == [
        f"no dead letters of {topic.name} in {tmp_path / 'no-dead-letters'}"]


def test_an_unknown_topic_or_an_unreadable_file_is_one_line(drained) -> None:
    env, topic, _, config_file = drained
    result = CliRunner().invoke(app, ["dead-letters", "--config", str(config_file), "--topic", "nope"])
    assert result.exit_code == 2 and result.stdout == ""  # --topic names no topic of the configuration: usage
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kprio: error: "), lines
    assert "no logical topic named 'nope'" in lines[0] and topic.name in lines[0], lines

    broken = Path(env.config.drain.dead_letter_path) / topic.name / "priority=1" / (
        f"{topic.priority_topic(1)}+0+0000000000+0000000004.parquet")
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"not parquet")
    result = CliRunner().invoke(app, ["dead-letters", "--config", str(config_file)])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert lines[0].startswith(f"kprio: error: cannot read the dead letters of {topic.name}: "), lines
    assert lines[0].endswith(f" (drain.dead_letter_path {env.config.drain.dead_letter_path}) "
                             "[dead_letters_unreadable]"), lines
