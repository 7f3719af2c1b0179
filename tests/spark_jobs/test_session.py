"""Session building: kprio's defaults, the configured overrides, the data source registered."""

from __future__ import annotations

import os
import sys

import pytest

from kprio_core.config import SparkSettings
from spark_jobs.session import session_conf


def test_configured_settings_win_over_defaults():
    conf = session_conf(SparkSettings(arrow_batch_records=123, conf={"spark.sql.session.timeZone": "Europe/Paris"}))
    assert conf["spark.sql.session.timeZone"] == "Europe/Paris"
    assert conf["spark.sql.execution.arrow.maxRecordsPerBatch"] == "123"


@pytest.mark.spark
def test_the_session_runs_this_interpreter_in_utc_with_the_source_registered(spark):
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    # Registered: an unknown option error comes from our source, not "data source not found".
    with pytest.raises(Exception, match="option 'splits' is required"):
        spark.read.format("kprio-kafka").option("kafka.bootstrap.servers", "127.0.0.1:1").load().count()
