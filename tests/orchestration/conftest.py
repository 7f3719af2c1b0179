"""Fixtures of the Dagster tests (defined in :mod:`tests.orchestration.dagster_env`)."""

import pytest

# The checks every bad input of the CLI tables runs (test_cli_errors*.py) report their asserts as a test's would.
pytest.register_assert_rewrite("tests.orchestration.cli_cases")

from tests.orchestration.dagster_env import dagster_instance, kprio_env  # noqa: E402, F401 (fixtures)
