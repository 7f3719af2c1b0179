"""``kprio instance init|show``: the ``dagster.yaml`` of a kprio deployment.

``init`` writes it into a Dagster home (never replacing a user's file unless ``--force``) and
creates the instance's storage; ``show`` prints it. Postgres storage takes the URL's parts,
never its password: that is read from an environment variable when the instance loads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orchestration.cli.common import ConfigOption, clean_errors, config_from, fail

app = typer.Typer(
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


def _yaml(config, postgres_url, postgres_url_env, password_env) -> str:  # noqa: ANN001
    from orchestration.dagster.instance_yaml import dagster_yaml

    if postgres_url and postgres_url_env:
        raise fail("give --postgres-url or --postgres-url-env, not both")
    return dagster_yaml(config_from(config), postgres_url=postgres_url, postgres_url_env=postgres_url_env,
                        postgres_password_env=password_env)


@app.command()
@clean_errors
def init(home: HomeOption = None, config: ConfigOption = None, postgres_url: PostgresUrlOption = None,
         postgres_url_env: PostgresUrlEnvOption = None, postgres_password_env: PasswordEnvOption = None,
         force: ForceOption = False) -> None:
    """Write dagster.yaml into the Dagster home and create the instance's storage there.

    Example: kprio instance init --home /srv/dagster --postgres-url postgresql://dagster@db:5432/dagster
    """
    from orchestration.dagster.instance import (
        DAGSTER_YAML,
        ENV_HOME,
        dagster_home,
        open_instance,
        write_dagster_yaml,
    )

    text = _yaml(config, postgres_url, postgres_url_env, postgres_password_env)
    home = (home or dagster_home()).absolute()
    target = home / DAGSTER_YAML
    if target.exists() and not force:
        raise fail(f"{target} exists: kept as is (pass --force to replace it; the old one is kept as .bak)")
    if target.exists():
        target.with_name(DAGSTER_YAML + ".bak").write_bytes(target.read_bytes())
    write_dagster_yaml(home, text, force=True)
    typer.echo(f"wrote {target}")
    try:
        with open_instance(env={ENV_HOME: str(home)}):
            pass  # creates the storage now, once, under the home's lock
    except Exception as err:  # noqa: BLE001 - Dagster config, driver and connection errors alike: one line
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise fail(f"the Dagster instance in {home} could not be opened: {type(err).__name__}: {first}") from None
    typer.echo(f"use it with: export {ENV_HOME}={home}   (then dagster dev, kprio drain, ...)")


@app.command()
@clean_errors
def show(config: ConfigOption = None, postgres_url: PostgresUrlOption = None,
         postgres_url_env: PostgresUrlEnvOption = None, postgres_password_env: PasswordEnvOption = None) -> None:
    """Print the dagster.yaml kprio would write for this configuration.

    Example: kprio instance show --config kprio.yaml > $DAGSTER_HOME/dagster.yaml
    """
    typer.echo(_yaml(config, postgres_url, postgres_url_env, postgres_password_env), nl=False)
