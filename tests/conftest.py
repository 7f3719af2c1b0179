"""Shared fixtures. Each kind of real part has its own plugin module under tests/fixtures/:

- ``tests.fixtures.kafka``: one Kafka-protocol broker per test session (embedded noida-db on a
  free port, or the cluster in ``KPRIO_BOOTSTRAP_SERVERS``);
- ``tests.fixtures.spark``: one local SparkSession per test session.
"""

pytest_plugins = ["tests.fixtures.kafka", "tests.fixtures.spark"]
