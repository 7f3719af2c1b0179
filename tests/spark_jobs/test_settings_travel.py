"""Every setting the python reader's executors use reaches them unchanged, as one typed value.

The executors' value is :class:`~spark_jobs.range_reader.ReadSettings`: the ``kafka`` and ``spark``
sections of ``KprioConfig`` and ``allow_data_loss``. The walk below visits every field of it (and of
every section it holds) through ``model_fields``, gives it another valid value, and follows the
value the way a drain does: ``KprioConfig`` -> :func:`~spark_jobs.source.source_options` -> the
source as Spark builds it (``KafkaSource(options).reader(schema)``) -> the reader a task gets. A
field added to a section is walked with no edit here; only a field whose type the walk cannot
make another value of (a validated string, a mapping of named keys) needs one in :data:`OTHER`.
One real Spark read then shows the value crossing to a Python worker as it is, pickled.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin

import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pyspark.sql.datasource import DataSourceReader

from kprio_core.config import KprioConfig
from spark_jobs.range_reader import ReadSettings
from spark_jobs.source import KafkaReader, KafkaSource, source_options

REPO = Path(__file__).resolve().parents[2]

OTHER: dict[str, Any] = {
    "kafka.bootstrap_servers": "broker-9:9093,broker-10:9094",
    "kafka.client": {"client.id": "travel", "fetch.wait.max.ms": 7, "check.crcs": True, "socket.timeout.ms": 2500.5},
    "kafka.secrets": {"sasl.password": "travel-secret", "ssl.key.password": "travel-key"},
    "spark.master": "local[3]",
    "spark.remote": "sc://spark-travel:15003",
}
"""Another valid value of the fields the walk cannot make one for (a validated string, named keys)."""


def _plain(annotation: Any) -> Any:
    """``X`` of ``X | None``."""
    if get_origin(annotation) in (Union, UnionType):
        args = [a for a in get_args(annotation) if a is not NoneType]
        return args[0] if len(args) == 1 else annotation
    return annotation


def another(key: str, info: FieldInfo) -> Any:
    """A valid value of the field other than its default."""
    if key in OTHER:
        return OTHER[key]
    default = info.get_default(call_default_factory=True)
    kind = _plain(info.annotation)
    if kind is bool:
        return not default
    if isinstance(kind, type) and issubclass(kind, Enum):
        return next(member for member in kind if member != default)
    if kind is int:
        return 7 if default is None else default + 1
    if kind is float:
        return 2.5 if default is None else default + 1.5
    if kind is str:
        return "travel" if default is None else f"{default}-travel"
    if get_origin(kind) is dict:
        return {"travel.key": "travel-value"}
    raise AssertionError(f"{key}: give it another valid value in OTHER (the walk cannot make one of {kind})")


def leaves(model: type[BaseModel] = ReadSettings, prefix: str = "") -> Iterator[tuple[str, FieldInfo]]:
    """``(section.field, its FieldInfo)`` of every field of the executors' value, sections walked into."""
    for name, info in model.model_fields.items():
        kind = _plain(info.annotation)
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            yield from leaves(kind, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", info


LEAVES = dict(leaves())


def config_with(changes: dict[str, Any]) -> KprioConfig:
    """The default config with ``changes`` (``section.field``; ``allow_data_loss`` is the drain's), validated."""
    raw: dict[str, dict[str, Any]] = {}
    for key, value in changes.items():
        section, _, field = key.rpartition(".")
        raw.setdefault(section or "drain", {})[field] = value
    return KprioConfig.model_validate(raw)


def executors_value(config: KprioConfig) -> KafkaReader:
    """The reader a task gets: the source built from the options as Spark builds it."""
    opts = source_options(config, [])
    source = KafkaSource(opts)
    return source.reader(source.schema())


def _at(value: BaseModel, key: str) -> Any:
    for part in key.split("."):
        value = getattr(value, part)
    return value


def in_config(config: KprioConfig, key: str) -> Any:
    """The setting ``key`` of the executors' value as the driver validated it (``allow_data_loss``: the drain's)."""
    return _at(config, key if "." in key else f"drain.{key}")


def unchanged(settings: ReadSettings, config: KprioConfig) -> dict[str, tuple[Any, Any]]:
    """Every field whose value in ``settings`` is not the config's: ``{key: (got, wanted)}``."""
    return {key: (_at(settings, key), in_config(config, key)) for key in LEAVES
            if _at(settings, key) != in_config(config, key)}


def test_the_walk_sees_every_section_the_executors_use() -> None:
    assert {key.split(".")[0] for key in LEAVES} == set(ReadSettings.model_fields)
    assert {"kafka.secrets", "kafka.timeout_s", "kafka.isolation_level", "spark.fetch_max_bytes",
            "spark.arrow_batch_records", "allow_data_loss"} <= set(LEAVES)
    assert not set(OTHER) - set(LEAVES), "OTHER names fields the executors' value does not have"


@pytest.mark.parametrize("key", list(LEAVES))
def test_every_field_reaches_the_executors_unchanged(key: str) -> None:
    value = another(key, LEAVES[key])
    config = config_with({key: value})
    wanted = in_config(config, key)  # as validated once, on the driver
    assert wanted != LEAVES[key].get_default(call_default_factory=True), f"the change of {key} changes nothing"
    got = _at(executors_value(config).settings, key)
    assert got == wanted and type(got) is type(wanted), f"{key}: the executors got {got!r}, not {wanted!r}"
    if isinstance(got, dict):  # no value of a mapping turned into another type on the way (7 into '7')
        assert [(k, type(v)) for k, v in got.items()] == [(k, type(v)) for k, v in wanted.items()]


def test_every_field_changed_at_once_reaches_the_executors_unchanged() -> None:
    config = config_with({key: another(key, info) for key, info in LEAVES.items()})
    reader = executors_value(config)
    assert unchanged(reader.settings, config) == {}
    assert reader.client == config.kafka.consumer_config()  # secrets in clear, values of their own types
    assert "travel-secret" not in repr(reader) and "travel-secret" not in repr(reader.settings)


def test_a_read_of_its_own_may_choose_allow_data_loss() -> None:
    config = config_with({"allow_data_loss": True})
    assert executors_value(config).settings.allow_data_loss is True  # drain.allow_data_loss, by default
    assert KafkaSource(source_options(config, [], allow_data_loss=False)).reader(None).settings.allow_data_loss is False


class SettingsProbe(KafkaSource):
    """``kprio-kafka`` itself, whose task answers the settings it got instead of reading Kafka."""

    @classmethod
    def name(cls) -> str:
        return "kprio-settings-probe"

    def schema(self) -> str:
        return "settings binary, client binary"

    def reader(self, schema: Any) -> DataSourceReader:
        return _ProbeReader(super().reader(schema))


class _ProbeReader(DataSourceReader):
    def __init__(self, reader: KafkaReader) -> None:
        self.reader = reader

    def partitions(self) -> list[Any]:
        return self.reader.partitions()

    def read(self, partition: Any) -> Iterator[tuple[bytes, bytes]]:
        yield pickle.dumps(self.reader.settings), pickle.dumps(dict(self.reader.client))


@pytest.mark.spark
def test_a_real_read_hands_every_task_the_value_as_it_is(spark) -> None:
    """Spark builds the reader from the options in one Python worker and pickles it to the tasks."""
    from kprio_core.model.drain_plan import PlannedRange
    from kprio_core.model.offsets import OffsetRange

    config = config_with({key: another(key, info) for key, info in LEAVES.items()})
    splits = [PlannedRange(0, OffsetRange("travel-0", p, 0, 10)) for p in range(3)]
    spark.dataSource.register(SettingsProbe)
    rows = spark.read.format(SettingsProbe.name()).options(**source_options(config, splits)).load().collect()
    assert len(rows) == 3  # one per task
    for row in rows:
        assert unchanged(pickle.loads(row.settings), config) == {}
        assert pickle.loads(row.client) == config.kafka.consumer_config()


def test_the_executors_modules_import_in_a_working_directory_that_is_gone(tmp_path):
    """A Spark Connect server's Python workers run in their session's directory, which Spark removes when the
    session ends; a worker forked after that has no working directory. The reader's modules must still import
    (they did not: the default output roots were made absolute at import, os.getcwd() raised FileNotFoundError,
    and every read of the server failed 'Failed to create Python data source instance')."""
    gone = tmp_path / "session"
    script = ("import os, sys; os.chdir(sys.argv[1]); os.rmdir(sys.argv[1]); "
              "import spark_jobs.range_reader, spark_jobs.source; from kprio_core.config import KprioConfig; "
              "KprioConfig(drain={'output_path': 'out', 'dead_letter_path': 'dead', 'replay_path': 'replay'}); "
              "print('imported')")
    gone.mkdir()
    done = subprocess.run([sys.executable, "-c", script, str(gone)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0 and done.stdout.strip() == "imported", done.stderr[-2000:]
