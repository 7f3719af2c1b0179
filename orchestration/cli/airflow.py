"""``kprio airflow init``: load kprio's DAGs into an Airflow 3 deployment (the ``airflow`` extra).

Never replaces a file kprio did not write unless ``--force``. The pool ``kprio_drain`` gets ``planner.max_in_flight``
x the largest number of priorities slots (with ``--no-pool`` or no ``airflow`` command, kprio says what to run).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Annotated

import typer

from kprio_core.errors import FileExistsRefused, ToolFailed
from orchestration.cli.boundary import KprioSubgroup
from orchestration.cli.common import ConfigOption, config_from, using_path

app = typer.Typer(
    cls=KprioSubgroup,
    help="Run kprio under Airflow 3: write the DAG file that loads kprio's DAGs from kprio.yaml.\n\n"
    "Example: kprio airflow init --dags-folder $AIRFLOW_HOME/dags --config kprio.yaml",
    no_args_is_help=True,
)

DAG_FILE = "kprio_dags.py"
MARK = "# written by kprio airflow init"


def dag_file_text(config: Path | None) -> str:
    """The DAG file: it loads ``config`` (absolute), else whatever $KPRIO_CONFIG or ./kprio.yaml names at parse time."""
    argument = repr(str(config.resolve())) if config is not None else ""
    return (f'"""kprio\'s Airflow DAGs (kprio_drain, kprio_redrain, kprio_replay, kprio_maintain), built from '
            f'kprio.yaml."""  {MARK}\n'
            "from orchestration.airflow.dags import kprio_dags\n\n"
            f"globals().update(kprio_dags({argument}))\n")


@app.command()
def init(
    dags_folder: Annotated[Path, typer.Option("--dags-folder", help="Airflow's dags folder ([core] dags_folder).")],
    config: ConfigOption = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a kprio_dags.py kprio did not write.")] = False,
    pool: Annotated[bool, typer.Option("--pool/--no-pool", help="Create or resize the pool kprio_drain.")] = True,
) -> None:
    """Write DAGS_FOLDER/kprio_dags.py and set up the pool kprio_drain.

    Example: kprio airflow init --dags-folder ~/airflow/dags --config /srv/kprio/kprio.yaml
    """
    # Not the DAGs' module: importing Airflow sets up its logging in this process.
    from orchestration.airflow.pool import POOL, pool_slots

    loaded = config_from(config)  # a configuration that does not load fails here, not in the DAG processor
    target = dags_folder / DAG_FILE
    with using_path("--dags-folder", dags_folder, doing="write"):
        if target.exists() and MARK not in target.read_text(errors="replace") and not force:
            raise FileExistsRefused("exists and kprio did not write it: pass --force to replace it", where=str(target))
        dags_folder.mkdir(parents=True, exist_ok=True)
        target.write_text(dag_file_text(config))
    typer.echo(f"wrote {target}: the DAGs kprio_drain, kprio_redrain, kprio_replay and kprio_maintain")
    slots = pool_slots(loaded)
    command = ["airflow", "pools", "set", POOL, str(slots), "kprio: drain and commit tasks in flight"]
    if not pool:
        typer.echo(f"create the pool yourself: {' '.join(command[:5])} '{command[5]}'")
        return
    if shutil.which("airflow") is None:
        raise ToolFailed(f"the airflow command is not on PATH: run {' '.join(command[:5])} '{command[5]}' where it "
                         "is", where="PATH")
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        last = said[-1] if said else "no output"
        raise ToolFailed(f"airflow pools set {POOL} failed (exit {done.returncode}): {last}", where="the airflow command")
    typer.echo(f"pool {POOL}: {slots} slots (planner.max_in_flight x priorities)")
