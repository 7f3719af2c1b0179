"""Shared fixtures. Each kind of real part has its own plugin module under tests/fixtures/:

- ``tests.fixtures.parallel``: the whole suite on two pytest-xdist workers, the host running the session's
  services (its broker shared with the guest) and the tests that need them, each worker with its own Spark;
- ``tests.fixtures.kafka``: one Kafka broker per test session (embedded Apache Kafka in KRaft mode
  on a free port, or the cluster in ``KPRIO_BOOTSTRAP_SERVERS``); ``tests.fixtures.kafka_cluster``: a module's
  three-node cluster for the failover tests;
- ``tests.fixtures.registry``: one schema registry per test session (embedded Apicurio Registry on a free
  port, or the registry in ``KPRIO_SCHEMA_REGISTRY_URL``);
- ``tests.fixtures.spark``: one local SparkSession per test session;
- ``tests.fixtures.postgres``: a throwaway PostgreSQL server (installed with apt-get when missing);
- ``tests.fixtures.browser``: headless Chromium from Debian (installed with apt-get when missing);
- ``tests.fixtures.airflow``: a throwaway Airflow 3 home for the session (set before Airflow is imported).

``tests.fixtures.transactions`` (plain helpers, no fixtures) writes with transactional producers and
reads what a read_committed consumer sees. ``tests.fixtures.daemon`` starts one kprio deployment under the real
Dagster daemon (``dagster dev``, the shipped dagster.yaml, a Spark Connect server) for the tests of ``tests/daemon``
when the session starts, and drains its backlogs in a thread while the other tests run; those tests run last.
"""

import gc
import os
import shutil
import signal
import tempfile

import pytest

TMPFS = "/dev/shm"
TMPFS_FREE_BYTES = 2 << 30  # a whole run's temporary files, about 400 MB, and the three runs pytest keeps


def _temporary_files_in_memory() -> None:
    """The session's temporary files (every ``tmp_path``, and ``TMPDIR`` for the processes it starts) on the
    machine's tmpfs when TMPDIR names no place and it has room.

    The tests' SQLite ledgers, Dagster instances and Iceberg catalogs are throwaway files, and on a disk each
    SQLite commit waits for an fsync: a Dagster test instance took 1.2-1.8 s to create on this machine's disk,
    0.4-0.8 s on its tmpfs. Nothing a test proves depends on a disk: a killed process's writes survive in
    memory as they do on a disk, and the full-disk and read-only tests mount file systems of their own.
    """
    if os.environ.get("TMPDIR") or not os.path.isdir(TMPFS) or not os.access(TMPFS, os.W_OK | os.X_OK):
        return
    with open("/proc/mounts") as mounts:
        if not any(line.split()[1:3] == [TMPFS, "tmpfs"] for line in mounts):
            return
    if shutil.disk_usage(TMPFS).free < TMPFS_FREE_BYTES:
        return
    os.environ["TMPDIR"] = TMPFS
    tempfile.tempdir = None  # tempfile.gettempdir() reads TMPDIR again


_temporary_files_in_memory()

pytest_plugins = ["tests.fixtures.parallel", "tests.fixtures.kafka", "tests.fixtures.kafka_cluster",
                  "tests.fixtures.registry", "tests.fixtures.spark", "tests.fixtures.postgres",
                  "tests.fixtures.browser", "tests.fixtures.airflow", "tests.fixtures.deployments",
                  "tests.fixtures.daemon", "tests.fixtures.airflow_deployment", "tests.fixtures.prometheus"]


@pytest.fixture(scope="session", autouse=True)
def _signals_as_in_a_foreground_process():
    """SIGINT and SIGTERM as a foreground process has them, however pytest was started.

    A shell starts a background job (``pytest &``, ``nohup``) with SIGINT ignored, and Dagster, when
    it runs a job in process on the main thread, afterwards sets SIGTERM to what SIGINT is: ignored.
    Every process a test starts then inherits an ignored SIGTERM, and a ``terminate()`` of it
    (Dagster's log tailers, ``dagster dev``) waits out its timeout instead of stopping it.
    """
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield


@pytest.fixture(autouse=True)
def _librdkafka_clients_die_here(request: pytest.FixtureRequest):
    """Collect a test's garbage on the main thread when it ends.

    ``pytest.raises`` keeps the traceback of a Kafka error, whose frames hold the failing client:
    a reference cycle. Left to the cyclic collector, it may run inside a librdkafka thread (any
    allocation there can trigger it), and librdkafka aborts the process when a client is
    destroyed from one of its own threads.

    What survives the collection is then frozen (``gc.freeze``): the next collection, this
    fixture's or Python's own, scans only what later tests allocate instead of the whole heap of
    Dagster, Spark and GX (a full collection of it took about a second, after every such test).
    A frozen object that later becomes cyclic garbage is never collected: a module's or the
    session's fixtures, at most, for the rest of the session.
    """
    yield
    if "kafka" in request.node.nodeid or request.node.get_closest_marker("broker"):
        gc.collect()
        gc.freeze()


@pytest.fixture(autouse=True)
def _no_worker_pool_outlives_its_test(request: pytest.FixtureRequest):
    """Stop the worker pools of the Dagster homes in a test's ``tmp_path`` when the test ends.

    Kept for the session otherwise: a pool lives while the process that said hello to it does, and a test that
    evaluates the sensor in process on a home naming kprio's launcher is such a process. A module's or the
    session's homes (the deployments') are not in a test's ``tmp_path``: their fixtures stop them.
    """
    tmp_path = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if tmp_path is not None:
        from tests.fixtures.dagster_dev import stop_pools_under

        stop_pools_under(tmp_path)
