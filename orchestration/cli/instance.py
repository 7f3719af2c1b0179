"""``kprio instance init|show``: the ``dagster.yaml`` of a kprio deployment.

``init`` writes it into a Dagster home (never replacing one unless ``--force``) and creates the storage; ``show``
prints it. A Postgres URL's password is never written: the instance reads it from an environment variable.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from kprio_core.errors import FileExistsRefused, UsageError
from orchestration.cli.boundary import KprioSubgroup
from orchestration.cli.common import ConfigOption, config_from, using_path

app = typer.Typer(
    cls=KprioSubgroup,
    help="Write or show the Dagster instance settings (dagster.yaml) a kprio deployment uses.\n\n"
    "Example: kprio instance init --home ./kprio-data/dagster_home --config kprio.yaml",
    no_args_is_help=True,
)

HomeOption = Annotated[
    Path | None,
    typer.Option("--home", help="The Dagster home (default: $DAGSTER_HOME, else ./kprio-data/dagster_home).",
                 show_default=False),
]
PostgresUrlOption = Annotated[
    str | None,
    typer.Option("--postgres-url", show_default=False,
                 help="Postgres storage at this URL (postgresql://user@host:5432/db); a password in it is not "
                 "written: the instance reads it from --postgres-password-env."),
]
PostgresUrlEnvOption = Annotated[
    str | None,
    typer.Option("--postgres-url-env", show_default=False,
                 help="Postgres storage at the URL held by this environment variable, read when the instance "
                 "loads (postgresql+psycopg2://user:password@host:5432/db)."),
]
PasswordEnvOption = Annotated[
    str | None,
    typer.Option("--postgres-password-env", show_default=False,
                 help="Environment variable holding the Postgres password (default KPRIO_DAGSTER_PG_PASSWORD "
                 "when the URL has one)."),
]
ForceOption = Annotated[
    bool, typer.Option("--force", help="Replace an existing dagster.yaml (kept as dagster.yaml.bak).")
]


def _storage(postgres_url: str | None, postgres_url_env: str | None, password_env: str | None) -> Any:
    """The Postgres block of dagster.yaml the options ask for (None: SQLite files in the home)."""
    from orchestration.dagster.instance_yaml import postgres_storage

    if postgres_url and postgres_url_env:
        raise UsageError("give --postgres-url or --postgres-url-env, not both", where="kprio instance")
    if postgres_url is None and postgres_url_env is None:
        return None
    return postgres_storage(postgres_url, url_env=postgres_url_env, password_env=password_env)


def _yaml(config: Path | None, storage: Any) -> str:
    from orchestration.dagster.instance_yaml import instance_settings, render

    return render(instance_settings(config_from(config), storage))


@app.command()
def init(home: HomeOption = None, config: ConfigOption = None, postgres_url: PostgresUrlOption = None,
         postgres_url_env: PostgresUrlEnvOption = None, postgres_password_env: PasswordEnvOption = None,
         force: ForceOption = False) -> None:
    """Write dagster.yaml into the Dagster home and create the instance's storage there.

    A Postgres storage is asked first: one that does not answer is one line, and no dagster.yaml is left behind.
    A password in --postgres-url is used for that and to create the storage, and written only as its variable.

    Example: kprio instance init --home /srv/dagster --postgres-url postgresql://dagster@db:5432/dagster
    """
    from kprio_core.urls import parsed_url

    storage = _storage(postgres_url, postgres_url_env, postgres_password_env)
    text = _yaml(config, storage)
    # Dagster only once the options and the configuration were read: a mistake there is told without its import.
    from orchestration.dagster.instance import DAGSTER_YAML, ENV_HOME, dagster_home, probe_storage
    home = (home or dagster_home()).absolute()
    target = home / DAGSTER_YAML
    with using_path("--home", home):
        if target.exists() and not force:
            raise FileExistsRefused("exists: kept as is (pass --force to replace it; the old one is kept as .bak)",
                                    where=str(target))
    given = parsed_url(postgres_url).password if postgres_url else None
    if storage is not None:
        probe_storage(storage, given)
    db = storage.postgres_db if storage is not None else None
    variable = db.password.env if db is not None and db.password is not None else None
    before = _write_keeping_the_old(home, target, text)
    _create_storage(home, target, before, {variable: given} if variable and given else {})
    typer.echo(f"wrote {target}")
    if variable and given and not os.environ.get(variable):
        typer.echo(f"the storage's password is read from {variable} when the instance loads: set it there")
    typer.echo(f"use it with: export {ENV_HOME}={home}   (then dagster dev, kprio drain, ...)")


def _write_keeping_the_old(home: Path, target: Path, text: str) -> bytes | None:
    """Write dagster.yaml into ``home``, the one it replaces kept as .bak; that one's bytes (None: there was none)."""
    from orchestration.dagster.instance import DAGSTER_YAML, write_dagster_yaml

    with using_path("--home", home, doing="write"):
        home.mkdir(parents=True, exist_ok=True)
        before = target.read_bytes() if target.exists() else None
        if before is not None:
            target.with_name(DAGSTER_YAML + ".bak").write_bytes(before)
        write_dagster_yaml(home, text, force=True)
    return before


def _create_storage(home: Path, target: Path, before: bytes | None, env: dict[str, str]) -> None:
    """Create the instance's storage, once, under the home's lock (``env``: the password given on the command line);
    on a failure the dagster.yaml written is taken back (``before``: the one it replaced)."""
    from orchestration.dagster.instance import ENV_HOME, open_instance

    try:
        with _environment(env), open_instance(env={ENV_HOME: str(home)}):
            pass
    except BaseException:
        if before is None:
            target.unlink(missing_ok=True)  # the next init must not find a dagster.yaml that never worked
        else:
            target.write_bytes(before)
        raise


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """``values`` set in this process's environment within the block only."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@app.command()
def show(config: ConfigOption = None, postgres_url: PostgresUrlOption = None,
         postgres_url_env: PostgresUrlEnvOption = None, postgres_password_env: PasswordEnvOption = None) -> None:
    """Print the dagster.yaml kprio would write for this configuration.

    Example: kprio instance show --config kprio.yaml > $DAGSTER_HOME/dagster.yaml
    """
    typer.echo(_yaml(config, _storage(postgres_url, postgres_url_env, postgres_password_env)), nl=False)
