"""The Dagster instance ``kprio drain`` runs on: ``$DAGSTER_HOME``, else ``./kprio-data/dagster_home``.

The default home is created with a ``dagster.yaml`` (telemetry off; storage in SQLite files
under the home, Dagster's default), so ``dagster dev`` started with the same ``DAGSTER_HOME``
shows the runs ``kprio drain`` executed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import dagster as dg

ENV_HOME = "DAGSTER_HOME"
DEFAULT_HOME = Path("kprio-data") / "dagster_home"
DAGSTER_YAML = """\
# Created by kprio: a local instance with SQLite storage in this directory.
telemetry:
  enabled: false
"""


def dagster_home(env: Mapping[str, str] | None = None) -> Path:
    """``$DAGSTER_HOME`` when set, else ``./kprio-data/dagster_home`` (absolute).

    >>> str(dagster_home({"DAGSTER_HOME": "/srv/dagster"}))
    '/srv/dagster'
    """
    env = os.environ if env is None else env
    if env.get(ENV_HOME):
        return Path(env[ENV_HOME])
    return DEFAULT_HOME.resolve()


def ensure_home(home: Path) -> Path:
    """Create ``home`` and its ``dagster.yaml`` when missing (an existing file is left alone)."""
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text(DAGSTER_YAML)
    return home


def open_instance(env: Mapping[str, str] | None = None) -> dg.DagsterInstance:
    """The configured Dagster instance (the caller closes it, e.g. ``with open_instance() as i``)."""
    home = ensure_home(dagster_home(env)).resolve()
    # DagsterInstance.get() reads DAGSTER_HOME; setting it is what `dagster dev` users do too.
    os.environ[ENV_HOME] = str(home)
    return dg.DagsterInstance.get()
