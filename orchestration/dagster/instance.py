"""The Dagster instance kprio runs on, and the ``dagster.yaml`` a kprio deployment uses.

The home is ``$DAGSTER_HOME``, else ``./kprio-data/dagster_home``; a home without a ``dagster.yaml`` gets kprio's
(:mod:`orchestration.dagster.instance_yaml`), never replacing a user's file (``kprio instance init --force`` does).

:func:`open_instance` creates the storage once and safely when several processes start on a new home: they take
turns on ``<home>/.kprio-instance.lock`` around the first ``DagsterInstance.get()``, which creates the SQLite
tables (without it two die with ``table alembic_version already exists``). Failures are kprio's errors:
:class:`~kprio_core.errors.PathUnusable` (the home), :class:`DagsterStorageUnavailable` (Postgres does not answer),
:class:`DagsterInstanceUnusable` (Dagster refuses the ``dagster.yaml``). :func:`probe_storage` asks Postgres once,
at once, before ``kprio instance init`` names it (Dagster itself retries for 13 s); :func:`instance_to_read`
creates nothing.

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
from kprio_core.errors import ConfigError, KprioError, PathUnusable
from kprio_core.urls import shown_url
from orchestration.dagster.instance_yaml import Postgres, dagster_yaml

ENV_HOME = "DAGSTER_HOME"
DEFAULT_HOME = Path("kprio-data") / "dagster_home"
DAGSTER_YAML = "dagster.yaml"
LOCK_FILE = ".kprio-instance.lock"
LOCK_TIMEOUT_S = 300.0
"""Longest a process waits for another one creating the instance's storage (seconds)."""


class InstanceBusy(KprioError):
    """Another process held the home's lock too long while opening the Dagster instance."""

    code = "instance_busy"


class DagsterStorageUnavailable(KprioError):
    """The Postgres storage of the Dagster instance does not answer, or refuses the login."""

    code = "dagster_storage_unavailable"
    transient = True


class DagsterInstanceUnusable(KprioError):
    """Dagster refuses the instance of a home (its ``dagster.yaml``)."""

    code = "dagster_instance_unusable"


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
    """Create ``home`` and its ``dagster.yaml`` (for ``config``, default: the loaded kprio.yaml); never replaces one."""
    if not (home / DAGSTER_YAML).exists():
        if config is None:
            from kprio_core.config import load_config

            config = load_config(None)
        write_dagster_yaml(home, dagster_yaml(config))
    return home


def open_instance(config: KprioConfig | Mapping[str, str] | None = None, *,
                  env: Mapping[str, str] | None = None) -> dg.DagsterInstance:
    """The Dagster instance of ``env``'s home (the caller closes it); a new home gets ``config``'s ``dagster.yaml``
    (default: the loaded kprio.yaml), concurrent callers waiting on its lock (at most LOCK_TIMEOUT_S); a mapping
    first (``open_instance({"DAGSTER_HOME": ...})``) is ``env``."""
    from filelock import Timeout

    if isinstance(config, Mapping):
        config, env = None, config

    home = dagster_home(env).resolve()
    try:
        home.mkdir(parents=True, exist_ok=True)
        lock = home_lock(home)
        with lock:
            ensure_home(home, config)
            # DagsterInstance.get() reads DAGSTER_HOME; setting it is what `dagster dev` users do too.
            os.environ[ENV_HOME] = str(home)
            return _opened(dg.DagsterInstance.get, home)
    except Timeout:
        raise InstanceBusy(
            f"another process has held {home / LOCK_FILE} for {LOCK_TIMEOUT_S:g} s while opening the Dagster "
            f"instance in {home}: is it stuck? (remove the lock file only when no kprio process runs)"
        ) from None
    except OSError as err:
        raise PathUnusable.of(err, f"the Dagster home {home} ({ENV_HOME})") from None


def instance_to_read(config: KprioConfig | None = None, *, env: Mapping[str, str] | None = None) -> dg.DagsterInstance:
    """The home's instance to read its runs, creating nothing (no ``dagster.yaml``: an empty in-memory instance)."""
    home = dagster_home(env)
    try:
        present = (home / DAGSTER_YAML).is_file()
    except OSError:
        present = False
    return open_instance(config, env=env) if present else dg.DagsterInstance.ephemeral()


def _opened(get: Any, home: Path) -> dg.DagsterInstance:
    """``get()``, its storage's and Dagster's own errors as kprio's (by type)."""
    from sqlalchemy.exc import OperationalError

    where = f"{home / DAGSTER_YAML}"
    try:
        return get()
    except OperationalError as err:
        raise DagsterStorageUnavailable(f"the Dagster instance's storage does not answer: {_first_line(err.orig)}",
                                        where=where) from err
    except dg.DagsterError as err:
        raise DagsterInstanceUnusable(f"Dagster cannot open the instance: {_first_line(err)}", where=where) from err


def _first_line(err: BaseException | None) -> str:
    return next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)


def probe_storage(storage: Postgres, password: str | None, *, env: Mapping[str, str] | None = None,
                  timeout_s: float = 10.0) -> None:
    """Connect once to the Postgres storage of a ``dagster.yaml`` (before it is written);
    DagsterStorageUnavailable saying why, naming the URL without its password, when it does not answer."""
    from sqlalchemy import create_engine
    from sqlalchemy.engine import URL, make_url
    from sqlalchemy.exc import ArgumentError, DBAPIError

    env = os.environ if env is None else env
    if storage.postgres_url is not None:
        variable = storage.postgres_url.env
        if not env.get(variable):
            raise ConfigError(f"{variable} is not set: it must hold the Postgres URL", where="--postgres-url-env")
        try:
            url = make_url(env[variable])
        except (ArgumentError, ValueError):
            raise DagsterInstanceUnusable("is not a Postgres URL", where=f"{variable} (--postgres-url-env)") from None
        option = f"--postgres-url-env {variable}"
    else:
        db = storage.postgres_db
        assert db is not None
        if password is None and db.password is not None:
            password = env.get(db.password.env)
        url = URL.create(db.scheme, db.username, password, db.hostname, db.port, db.db_name, db.params or {})
        option = "--postgres-url"
    engine = create_engine(url, connect_args={"connect_timeout": max(1, int(timeout_s))})
    try:
        with engine.connect():
            pass
    except DBAPIError as err:
        raise DagsterStorageUnavailable(f"the Postgres storage does not answer: {_first_line(err.orig)}",
                                        where=f"{option} {shown_url(url)}") from None
    except ImportError as err:
        raise DagsterInstanceUnusable(f"the driver {url.drivername} is not installed ({err.name})",
                                      where=option) from None
    finally:
        engine.dispose()
