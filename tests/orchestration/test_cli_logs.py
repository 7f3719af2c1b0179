"""A command's terminal holds its own output: the libraries' log lines go to its log file, never to stderr."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import typer

from orchestration.cli.boundary import EXIT_FAILED, KprioGroup, take_options
from orchestration.cli.logs import routed_logs
from orchestration.cli.redaction import Redactor
from tests.fixtures.dagster_instances import fresh_instance


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
            fresh_instance() as instance:
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


def test_a_log_file_that_cannot_be_written_is_one_line_not_a_traceback_per_line(capfd):
    """/dev/full takes the open and fails every write: Python logging printed its traceback on stderr for each line
    (886 lines for a kprio topics verify without a broker). Now the lines are dropped, and a command that otherwise
    succeeds fails with the one line naming the file and the option (a command that fails says its own line: the
    table of bad inputs, 'log file full')."""
    app = typer.Typer(cls=KprioGroup, add_completion=False)

    @app.callback()
    def root(ctx: typer.Context, log_file: Path = typer.Option(None, "--log-file")) -> None:  # noqa: B008
        take_options(ctx, debug=False, verbose=False, log_file=log_file)

    @app.command()
    def talk() -> None:
        for n in range(30):
            logging.getLogger("kprio.test").warning("line %d of a command that logs", n)

    @app.command()
    def other() -> None:
        pass

    code = app(["--log-file", "/dev/full", "talk"], prog_name="kprio", standalone_mode=False)
    err = capfd.readouterr().err
    assert code == EXIT_FAILED
    assert err.splitlines() == ["kprio: error: cannot write '/dev/full': no space left on the device (--log-file "
                                "/dev/full) [path_unusable]"], err
    assert app(["--log-file", "/dev/full", "other"], prog_name="kprio", standalone_mode=False) == 0
    assert capfd.readouterr().err == "", "nothing logged, nothing lost"
