"""Fixtures of the Dagster tests (defined in :mod:`tests.orchestration.dagster_env`)."""

from tests.orchestration.dagster_env import dagster_instance, kprio_env  # noqa: F401 (fixtures)
