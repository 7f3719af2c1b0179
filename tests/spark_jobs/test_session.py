"""Session building: kprio's defaults, the configured overrides, the data source registered; every setting acts."""

from __future__ import annotations

import os
import sys

import pytest

from kprio_core.config import KprioConfig, SparkSettings
from spark_jobs.session import session_conf
from spark_jobs.source import source_options

WHERE_EACH_SETTING_ACTS = {
    "master": "the session's master (test_the_session_runs_this_interpreter_in_utc_with_the_source_registered)",
    "remote": "a Spark Connect session (test_connect.py)",
    "reader": "python source or Spark's kafka source (test_native.py: the native reader drives the drain)",
    "conf": "session_conf, below",
    "fetch_max_bytes": "source options, below",
    "max_partition_fetch_bytes": "source options, below",
    "queued_max_messages_kbytes": "source options, below",
    "arrow_batch_records": "session_conf and source options (batches, Parquet row groups), below",
    "connect_port": "the Spark Connect server `kprio spark start` runs (orchestration.services), not a session",
    "connect_dir": "the Spark Connect server `kprio spark start` runs (orchestration.services), not a session",
}


def test_every_spark_setting_is_accounted_for_and_reaches_where_it_acts():
    assert set(SparkSettings.model_fields) == set(WHERE_EACH_SETTING_ACTS)
    changed = SparkSettings(conf={"spark.sql.session.timeZone": "Europe/Paris"}, arrow_batch_records=123,
                            fetch_max_bytes=2048, max_partition_fetch_bytes=1025, queued_max_messages_kbytes=3)
    conf = session_conf(changed)
    assert conf["spark.sql.session.timeZone"] == "Europe/Paris"  # configured settings win over kprio's defaults
    assert conf["spark.sql.execution.arrow.maxRecordsPerBatch"] == "123"
    opts = source_options(KprioConfig(spark=changed), [])
    assert (opts["arrowBatchRecords"], opts["fetchMaxBytes"], opts["maxPartitionFetchBytes"],
            opts["queuedMaxMessagesKbytes"]) == ("123", "2048", "1025", "3")


@pytest.mark.spark
def test_the_session_runs_this_interpreter_in_utc_with_the_source_registered(spark):
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    assert spark.sparkContext.master == "local[2]"
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    # Registered: an unknown option error comes from our source, not "data source not found".
    with pytest.raises(Exception, match="option 'splits' is required"):
        spark.read.format("kprio-kafka").option("kafka.bootstrap.servers", "127.0.0.1:1").load().count()
