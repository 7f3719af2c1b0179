"""The Dagster instance kprio runs on, and the ``dagster.yaml`` a kprio deployment uses.

The home is ``$DAGSTER_HOME``, else ``./kprio-data/dagster_home``; its ``dagster.yaml`` holds
kprio's instance settings (:mod:`orchestration.dagster.instance_yaml`). A home without a ``dagster.yaml``
gets one (:func:`ensure_home`, never replacing a user's file); ``kprio instance init --force``
rewrites it.

:func:`open_instance` creates the instance's storage once and safely when several kprio
processes start together on a new home: they take turns on ``<home>/.kprio-instance.lock``
(a ``filelock.FileLock``) around the first ``DagsterInstance.get()``, which creates the SQLite
tables; without it two processes die with ``table alembic_version already exists``.

>>> str(dagster_home({"DAGSTER_HOME": "/srv/dagster"}))
'/srv/dagster'
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import dagster as dg

from kprio_core.config import KprioConfig
from kprio_core.errors import KprioError
from orchestration.dagster.instance_yaml import dagster_yaml

ENV_HOME = "DAGSTER_HOME"
DEFAULT_HOME = Path("kprio-data") / "dagster_home"
DAGSTER_YAML = "dagster.yaml"
LOCK_FILE = ".kprio-instance.lock"
LOCK_TIMEOUT_S = 300.0
"""Longest a process waits for another one creating the instance's storage (seconds)."""


class InstanceBusy(KprioError):
    """Another process held the home's lock too long while opening the Dagster instance."""

    code = "instance_busy"


def dagster_home(env: Mapping[str, str] | None = None) -> Path:
    """``$DAGSTER_HOME`` when set, else ``./kprio-data/dagster_home`` (absolute).

    >>> str(dagster_home({"DAGSTER_HOME": "/srv/dagster"}))
    '/srv/dagster'
    """
    env = os.environ if env is None else env
    if env.get(ENV_HOME):
        return Path(env[ENV_HOME])
    return DEFAULT_HOME.resolve()


_LOCKS: dict[Path, Any] = {}


def home_lock(home: Path) -> Any:
    """The ``FileLock`` on ``<home>/.kprio-instance.lock`` (one object per home in a process: it is reentrant)."""
    from filelock import FileLock

    path = (home / LOCK_FILE).resolve()
    if path not in _LOCKS:
        _LOCKS[path] = FileLock(str(path), timeout=LOCK_TIMEOUT_S)
    return _LOCKS[path]


def write_dagster_yaml(home: Path, text: str, *, force: bool = False) -> bool:
    """Write ``<home>/dagster.yaml`` atomically; an existing file is kept unless ``force``. True when written."""
    home.mkdir(parents=True, exist_ok=True)
    target = home / DAGSTER_YAML
    with home_lock(home):
        if target.exists() and not force:
            return False
        with tempfile.NamedTemporaryFile("w", dir=home, prefix=".dagster.yaml.", delete=False) as tmp:
            tmp.write(text)
        os.chmod(tmp.name, 0o644)  # readable by the webserver and daemon users, as a plain write would be
        os.replace(tmp.name, target)
    return True


def ensure_home(home: Path, config: KprioConfig | None = None) -> Path:
    """Create ``home`` and its ``dagster.yaml`` (for ``config``, default: the loaded kprio.yaml) when missing.

    A ``dagster.yaml`` that exists is never replaced: it is the user's.
    """
    if not (home / DAGSTER_YAML).exists():
        if config is None:
            from kprio_core.config import load_config

            config = load_config(None)
        write_dagster_yaml(home, dagster_yaml(config))
    return home


def open_instance(config: KprioConfig | Mapping[str, str] | None = None, *,
                  env: Mapping[str, str] | None = None) -> dg.DagsterInstance:
    """The Dagster instance of ``env``'s home (the caller closes it: ``with open_instance(cfg) as i``).

    A new home gets the ``dagster.yaml`` of ``config`` (default: the loaded kprio.yaml). Several
    processes may call this at once on a new home: the first creates the storage while the
    others wait on the home's lock (at most LOCK_TIMEOUT_S), then open what it created.
    ``open_instance({"DAGSTER_HOME": ...})`` (a mapping first) still means ``env=``.
    """
    from filelock import Timeout

    if isinstance(config, Mapping):
        config, env = None, config

    home = dagster_home(env).resolve()
    home.mkdir(parents=True, exist_ok=True)
    lock = home_lock(home)
    try:
        with lock:
            ensure_home(home, config)
            # DagsterInstance.get() reads DAGSTER_HOME; setting it is what `dagster dev` users do too.
            os.environ[ENV_HOME] = str(home)
            return dg.DagsterInstance.get()
    except Timeout:
        raise InstanceBusy(
            f"another process has held {home / LOCK_FILE} for {LOCK_TIMEOUT_S:g} s while opening the Dagster "
            f"instance in {home}: is it stuck? (remove the lock file only when no kprio process runs)"
        ) from None
