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
