"""A command's terminal holds its own output: the libraries' log lines go to its log file, never to stderr."""

from __future__ import annotations

import logging

import pytest

from orchestration.cli.logs import routed_logs
from orchestration.cli.redaction import Redactor


@pytest.mark.parametrize("name", ["pyiceberg.io.pyarrow", "dagster", "kprio.kafka"])
def test_a_library_warning_goes_to_the_log_file_not_to_the_terminal(name, tmp_path, capsys):
    log = tmp_path / "kprio.log"
    with routed_logs(verbose=False, log_file=log, log_file_from="--log-file", debug=False, redact=Redactor(())):
        logging.getLogger(name).warning("PyArrow statistics missing for column 8 when writing file")
    assert "statistics missing" not in capsys.readouterr().err
    assert "statistics missing" in log.read_text()


def test_a_run_that_fails_in_process_logs_to_the_file_not_to_the_terminal(tmp_path, capfd):
    """kprio drain's runs (drain_loop.execute): Dagster's console logger wrote a failed step's lines to stderr itself."""
    import dagster as dg

    from orchestration.dagster.run_logs import logged_job

    @dg.op
    def handler_step() -> None:
        raise ValueError("the handler broke on record 7")

    @dg.job
    def drain_job() -> None:
        handler_step()

    log = tmp_path / "kprio.log"
    with routed_logs(verbose=False, log_file=log, log_file_from="--log-file", debug=False, redact=Redactor(())), \
            dg.instance_for_test() as instance:
        result = logged_job(dg.Definitions(jobs=[drain_job]), "drain_job").execute_in_process(
            run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}}, instance=instance,
            raise_on_error=False)
    assert not result.success
    assert "handler broke" not in capfd.readouterr().err
    assert "handler broke on record 7" in log.read_text()


def test_a_local_spark_jvm_writes_its_stderr_to_the_log_file(tmp_path, capfd):
    """What a JVM started inside the block inherits as file descriptor 2 (spark_jobs.library_logs.jvm_stderr)."""
    import subprocess

    from spark_jobs.library_logs import jvm_stderr

    log = tmp_path / "kprio.log"
    with routed_logs(verbose=False, log_file=log, log_file_from="--log-file", debug=False, redact=Redactor(())), \
            jvm_stderr():
        subprocess.run(["sh", "-c", "echo 'WARN NativeCodeLoader: Unable to load native-hadoop library' >&2"],
                       check=True)
    assert "NativeCodeLoader" not in capfd.readouterr().err
    assert "NativeCodeLoader" in log.read_text()
