"""The Dagster instance on which ``kprio drain`` executes several runs at once, in threads of one process.

Two things Dagster does per run are process-wide, and race when two runs start or end at once:

- each run captures its process's stdout and stderr into its compute log by redirecting file
  descriptors 1 and 2 and restoring them at its end; two runs restore each other's copies, and the
  process was left writing into a finished run's log file (``kprio drain --json`` printed its
  summary there). The runs here capture nothing: the copy of the instance has Dagster's
  ``NoOpComputeLogManager`` as its ``compute_logs`` (the ``dagster.yaml`` block Dagster documents in
  its instance reference), built with the public factory ``DagsterInstance.local_temp`` from the
  instance's own directory and proven to open the same storage (:func:`same_storage`); the runs'
  structured event logs are kept as always, and a log capture of a whole process could not tell two
  runs apart;
- each run's log manager calls ``instance.get_handlers()``, which calls ``logging.config.dictConfig``
  whenever the instance has settings; dictConfig holds the logging module's lock while it flushes and
  closes every handler of the process, and a run logging in another thread holds its handler's lock
  while it waits for the module's lock: two runs deadlocked (py-spy showed both stacks; the deadlock is
  CPython's python/cpython#96727, closed by documenting it: logging reconfigured while other threads log
  can deadlock). The handlers come from the instance's YAML, which does not change while it is open, so the
  first call's handlers serve every run (:func:`handlers_built_once`).

Dagster has no public API for the second: no setting skips the per-run dictConfig, and the
instance's settings (run retries, concurrency pools) must stay. :func:`handlers_built_once` is the one
workaround, at this one place: it wraps the bound method of this one copy of the instance (no module
or class of Dagster is patched; the instance the caller passed is untouched). It waits for Dagster
to build an instance's YAML-defined handlers once per instance (``DagsterInstance.get_yaml_python_handlers``,
``dagster/_core/instance/methods/event_methods.py``, Dagster 1.13). The Dagster issue it waits for is
dagster-io/dagster#16726 (open since 2023: a run hangs for good once ``dagster.yaml`` has ``python_logs``, the
settings that make this method call ``dictConfig``; by its report the same per-run reconfiguration of logging
while another thread logs). The change to propose there is this function's body: build the handlers once per
instance. Remove it when Dagster does.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import dagster as dg

from kprio_core.errors import KprioError

NO_COMPUTE_LOGS = {"module": "dagster._core.storage.noop_compute_log_manager", "class": "NoOpComputeLogManager"}
"""Dagster's documented ``compute_logs`` block that captures nothing (a ``dagster.yaml`` value, not an import)."""


class ThreadedInstanceMismatch(KprioError):
    """The copy of a Dagster instance for threaded runs does not open the instance's own storage."""

    code = "threaded_instance_mismatch"


@contextmanager
def for_runs_in_threads(instance: dg.DagsterInstance) -> Iterator[dg.DagsterInstance]:
    """An instance on the same storage as ``instance`` whose runs can execute in several threads of this process.

    ``instance`` is one whose settings live in its root directory: a home with a ``dagster.yaml``
    (``kprio drain``'s, ``DagsterInstance.from_config``) or the default local storage of
    ``dg.instance_for_test``; the copy is proven to open the same storage (:func:`same_storage`).
    """
    root = instance.root_directory
    threaded = dg.DagsterInstance.local_temp(
        tempdir=root, overrides={"compute_logs": NO_COMPUTE_LOGS, "telemetry": {"enabled": instance.telemetry_enabled}})
    try:
        if not same_storage(threaded, instance):
            raise ThreadedInstanceMismatch(
                "the copy of the Dagster instance for kprio drain's runs does not open the instance's storage: its "
                "dagster.yaml must be in its root directory (local_artifact_storage.base_dir)", where=root)
        threaded.get_yaml_python_handlers = handlers_built_once(threaded.get_yaml_python_handlers)  # type: ignore[method-assign]
        yield threaded
    finally:
        threaded.dispose()


PROBE_PARTITIONS = "kprio_threaded_instance_probe"
"""The dynamic partitions definition :func:`same_storage` writes one key of, and deletes it."""


def same_storage(copy: dg.DagsterInstance, instance: dg.DagsterInstance) -> bool:
    """Whether ``copy`` writes where ``instance`` reads: a partition key added through the one is there for the
    other (and deleted after), with Dagster's public partition API."""
    key = f"{os.getpid()}-{uuid.uuid4().hex}"
    copy.add_dynamic_partitions(PROBE_PARTITIONS, [key])
    try:
        return instance.has_dynamic_partition(PROBE_PARTITIONS, key)
    finally:
        copy.delete_dynamic_partition(PROBE_PARTITIONS, key)


def handlers_built_once(build: Callable[[], Sequence]) -> Callable[[], list]:
    """``build``'s first answer for every call, built under a lock (see the module docstring: the workaround).

    >>> calls = []
    >>> once = handlers_built_once(lambda: calls.append(1) or ["handler"])
    >>> once(), once(), len(calls)
    (['handler'], ['handler'], 1)
    """
    built: list[list] = []
    lock = threading.Lock()

    def once() -> list:
        with lock:
            if not built:
                built.append(list(build()))
            return built[0]

    return once
