"""The Dagster instance kprio runs on, and the ``dagster.yaml`` a kprio deployment uses.

The home is ``$DAGSTER_HOME``, else ``./kprio-data/dagster_home``. :func:`dagster_yaml` writes
kprio's instance settings (run monitoring, run retries, the run queue and concurrency limits
that enforce ``planner.max_in_flight``, telemetry and the first-visit modal off, SQLite or
Postgres storage), each line commented. A home without a ``dagster.yaml`` gets one
(:func:`ensure_home`, never replacing a user's file); ``kprio instance init --force`` rewrites it.

:func:`open_instance` creates the instance's storage once and safely when several kprio
processes start together on a new home: they take turns on ``<home>/.kprio-instance.lock``
(a ``filelock.FileLock``) around the first ``DagsterInstance.get()``, which creates the SQLite
tables; without it two processes die with ``table alembic_version already exists``.

>>> from kprio_core.config import KprioConfig
>>> cfg = KprioConfig.model_validate({"topics": [{"name": "orders", "priorities": 3},
...                                              {"name": "audit", "priorities": 2}],
...                                   "planner": {"max_in_flight": 2}})
>>> total_slots(cfg)
10
>>> [(limit["key"], limit["limit"]) for limit in tag_concurrency_limits(cfg)]
[('kprio/slot-p0', 2), ('kprio/slot-p1', 2), ('kprio/slot-p2', 2), ('dagster/partition', 1)]
>>> postgres_storage("postgresql+psycopg://kprio:s3cret@db.internal:6432/dagster?sslmode=require")["postgres_db"]
{'username': 'kprio', 'hostname': 'db.internal', 'port': 6432, 'db_name': 'dagster',
 'scheme': 'postgresql+psycopg2', 'params': {'sslmode': 'require'}, 'password': {'env': 'KPRIO_DAGSTER_PG_PASSWORD'}}
>>> str(dagster_home({"DAGSTER_HOME": "/srv/dagster"}))
'/srv/dagster'
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import dagster as dg

from kprio_core.config import KprioConfig
from kprio_core.errors import KprioError
from orchestration.tags import PARTITION_TAG, SLOT_TAG_PREFIX

ENV_HOME = "DAGSTER_HOME"
DEFAULT_HOME = Path("kprio-data") / "dagster_home"
DAGSTER_YAML = "dagster.yaml"
LOCK_FILE = ".kprio-instance.lock"
LOCK_TIMEOUT_S = 300.0
"""Longest a process waits for another one creating the instance's storage (seconds)."""
DEFAULT_PG_PASSWORD_ENV = "KPRIO_DAGSTER_PG_PASSWORD"
PG_SCHEME = "postgresql+psycopg2"
"""dagster-postgres binds NOTIFY parameters client-side, which only psycopg2 does; SQLAlchemy 2.1's
plain ``postgresql://`` means psycopg 3 (server-side binding: ``syntax error at or near "$1"``)."""

POLL_INTERVAL_S = 5
"""Run monitoring tick: a run whose process died is failed within a few of these."""
START_TIMEOUT_S = 180
"""A run not started after this long is failed (code server load + run worker + imports)."""
CANCEL_TIMEOUT_S = 60
MAX_RUNTIME_S = 3600
"""Generous bound on one run: kprio sizes batches to seconds (planner.target_batch_s)."""
FREE_SLOTS_AFTER_S = 10
DEQUEUE_INTERVAL_S = 1


class InstanceBusy(KprioError):
    """Another process held the home's lock too long while opening the Dagster instance."""

    code = "instance_busy"


def total_slots(config: KprioConfig) -> int:
    """Priority slots of every logical topic: sum of priorities x ``planner.max_in_flight``."""
    return sum(t.priorities for t in config.topics) * config.planner.max_in_flight


def tag_concurrency_limits(config: KprioConfig) -> list[dict[str, Any]]:
    """One limit per priority slot tag (``max_in_flight`` runs per logical topic), one run per batch."""
    top = max(t.priorities for t in config.topics)
    per_unique = {"applyLimitPerUniqueValue": True}
    limits = [{"key": f"{SLOT_TAG_PREFIX}{p}", "value": per_unique, "limit": config.planner.max_in_flight}
              for p in range(top)]
    limits.append({"key": PARTITION_TAG, "value": per_unique, "limit": 1})
    return limits


def postgres_storage(url: str | None = None, *, url_env: str | None = None,
                     password_env: str | None = None) -> dict[str, Any]:
    """Dagster's ``storage: postgres:`` block; never a password, only the variable that holds it.

    ``url_env``: the whole URL is read from that variable when the instance loads (it must name
    the psycopg2 driver: ``postgresql+psycopg2://...``). ``url``: its parts are written (any
    driver in it is replaced by psycopg2); its password (or ``password_env`` when given) becomes
    ``password: {env: <password_env, default KPRIO_DAGSTER_PG_PASSWORD>}``.
    """
    if url_env is not None:
        return {"postgres_url": {"env": url_env}}
    if url is None:
        raise ValueError("postgres storage needs a URL or the environment variable that holds one")
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except Exception:  # noqa: BLE001 - ArgumentError and friends; their text would echo the password
        raise ValueError("postgres URL is not valid: expected postgresql://user[:password]@host[:port]/dbname") from None
    if not parsed.drivername.startswith("postgres"):
        raise ValueError(f"postgres URL must start with postgresql://, got {parsed.drivername}://")
    if not (parsed.username and parsed.host and parsed.database):
        raise ValueError("postgres URL needs a user, a host and a database: postgresql://user@host:5432/dbname")
    db: dict[str, Any] = {"username": parsed.username, "hostname": parsed.host, "port": parsed.port or 5432,
                          "db_name": parsed.database, "scheme": PG_SCHEME}
    if parsed.query:
        db["params"] = {k: v if isinstance(v, str) else ",".join(v) for k, v in parsed.query.items()}
    if parsed.password is not None or password_env is not None:
        db["password"] = {"env": password_env or DEFAULT_PG_PASSWORD_ENV}
    return {"postgres_db": db}


def _y(value: Any) -> str:
    """A YAML flow value (JSON is YAML): strings quoted, numbers and booleans plain."""
    return json.dumps(value)


def dagster_yaml(config: KprioConfig, *, postgres_url: str | None = None, postgres_url_env: str | None = None,
                 postgres_password_env: str | None = None) -> str:
    """The ``dagster.yaml`` of a kprio deployment, commented line by line.

    Storage is SQLite files under the home unless ``postgres_url`` (its parts, the password
    from ``postgres_password_env``) or ``postgres_url_env`` (the variable holding the URL) is given.
    """
    planner, recovery = config.planner, config.recovery
    slots = total_slots(config)
    retries = recovery.max_attempts - 1
    lines = [
        "# Dagster instance settings of a kprio deployment, written by `kprio instance init`",
        "# (orchestration/instance.py). Edit freely: kprio never overwrites an existing file",
        "# unless asked with `kprio instance init --force`.",
        "",
        "# No usage statistics sent to Dagster Labs.",
        "telemetry:",
        "  enabled: false",
        "# No \"Join the community\" modal on the UI's first visit.",
        "nux:",
        "  enabled: false",
        "",
        "# Run monitoring (a daemon: `dagster dev` or `dagster-daemon run`). With the default run",
        "# launcher a run executes in a child process of the code server that launched it; the code",
        "# server checks its children every 0.5 s and marks the run FAILURE as soon as that process",
        "# is gone (kill -9, OOM), whether or not this block is here. The DefaultRunLauncher has no",
        "# worker health check, so nothing sees a dead run whose code server died with it (machine",
        "# loss, `dagster dev` killed) or a run `kprio drain` executed in its own killed process:",
        "# the daemon fails those only at max_runtime_seconds below; kprio's batch lease",
        "# (recovery.lease_s) retries their batches long before that.",
        "run_monitoring:",
        "  enabled: true",
        f"  poll_interval_seconds: {POLL_INTERVAL_S}",
        "  # A run still STARTING (or NOT_STARTED) after this long is failed.",
        f"  start_timeout_seconds: {START_TIMEOUT_S}",
        "  # A run still CANCELING after this long is marked canceled.",
        f"  cancel_timeout_seconds: {CANCEL_TIMEOUT_S}",
        "  # Generous bound on any run (kprio batches take seconds): terminated and failed after it.",
        f"  max_runtime_seconds: {MAX_RUNTIME_S}",
        "  # The DefaultRunLauncher cannot resume a run in a new worker: fail it, then retry it.",
        "  max_resume_run_attempts: 0",
        "  # Op-granularity pool slots a run still claims after it ended are freed after this long",
        "  # (kprio's own pool below counts runs and claims none).",
        f"  free_slots_after_run_end_seconds: {FREE_SLOTS_AFTER_S}",
        "",
        f"# A failed run is re-executed by the daemon, up to recovery.max_attempts ({recovery.max_attempts})",
        "# attempts in all; asset and op failures too (a failed drain or commit is retried).",
        "run_retries:",
        f"  enabled: {_y(retries > 0)}",
        f"  max_retries: {retries}",
        "  retry_on_asset_or_op_failure: true",
        "",
        "# The QueuedRunCoordinator (Dagster's default): every run (sensor, backfill, UI, retry) waits",
        "# in the queue until the limits under `concurrency:` let it start.",
        "run_queue:",
        "  # Seconds between two looks at the queue: a freed slot is used within about a second.",
        f"  dequeue_interval_seconds: {DEQUEUE_INTERVAL_S}",
        "  # Launch dequeued runs in parallel rather than one after the other.",
        "  dequeue_use_threads: true",
        "  dequeue_num_workers: 4",
        "  # A code server that is reloading does not fail the runs dequeued meanwhile.",
        "  max_user_code_failure_retries: 3",
        "  user_code_failure_retry_delay: 5",
        "",
        "# What may run at once: the queue starts a run only within the `runs:` limits and, when the",
        "# run uses a pool, within `pools:`. Runs that wait stay QUEUED and the UI says why.",
        "concurrency:",
        "  runs:",
        "    # Runs in progress at once on this instance, whatever they are.",
        f"    max_concurrent_runs: {max(10, slots)}",
        "    tag_concurrency_limits:",
    ]
    for limit in tag_concurrency_limits(config):
        if limit["key"] == PARTITION_TAG:
            lines.append("      # One run per batch partition at a time, whatever launched it.")
        elif limit["key"] == f"{SLOT_TAG_PREFIX}0":
            lines.append(f"      # planner.max_in_flight ({planner.max_in_flight}) runs per priority slot of each "
                         "logical topic:")
            lines.append("      # a run carries kprio/slot-p<n>=<logical topic> for every priority it drains.")
        lines += [f"      - key: {_y(limit['key'])}",
                  "        value:",
                  "          applyLimitPerUniqueValue: true",
                  f"        limit: {limit['limit']}"]
    lines += [
        "  # The drain op declares pool `kprio_drain`; a pool without a limit of its own (set with",
        "  # `dagster instance concurrency set`) gets default_limit. Run granularity: the queue starts",
        f"  # a run using the pool only while fewer than sum(priorities) x max_in_flight = {slots} runs",
        "  # using it are in progress. It counts runs, it stores no slot claims: op granularity would",
        "  # leave the slot of a killed in-process run (`kprio drain`, kill -9) claimed until a daemon",
        "  # freed it, and the next drain would wait for it. Runs `kprio drain` executes in process",
        "  # bypass the queue: kprio's ledger holds them to planner.max_in_flight.",
        "  pools:",
        "    granularity: run",
        f"    default_limit: {slots}",
        "",
        "# The sensor daemon evaluates sensors every 5 s at most (Dagster's loop); threads keep a slow",
        "# tick from delaying the others, and the runs of one tick are submitted in parallel.",
        "sensors:",
        "  use_threads: true",
        "  num_workers: 4",
        "  num_submit_workers: 4",
        "# Backfills (UI re-drains of chosen batches): submitted in parallel threads as well.",
        "backfills:",
        "  use_threads: true",
        "  num_workers: 2",
        "  num_submit_workers: 2",
        "",
        f"# A sensor ticking every {config.sensor.interval_s} s writes thousands of ticks a day: keep a week of them.",
        "retention:",
        "  sensor:",
        "    purge_after_days:",
        "      skipped: 1",
        "      success: 7",
        "      failure: 30",
        "      started: 7",
        "",
    ]
    if postgres_url is None and postgres_url_env is None:
        lines += [
            "# Storage: no `storage:` key means Dagster's default, SQLite files in this directory",
            "# (history/, storage/, schedules/). For production use Postgres: kprio instance init --postgres-url ...",
        ]
    else:
        pg = postgres_storage(postgres_url, url_env=postgres_url_env, password_env=postgres_password_env)
        lines += ["# Storage: runs, event logs and schedules in PostgreSQL (dagster-postgres). No password",
                  "# is written here: it is read from the environment when the instance loads.",
                  "storage:",
                  "  postgres:"]
        if "postgres_url" in pg:
            lines += ["    # The whole URL, e.g. postgresql+psycopg2://user:password@host:5432/db (dagster-postgres",
                      "    # needs the psycopg2 driver).",
                      "    postgres_url:", f"      env: {pg['postgres_url']['env']}"]
        else:
            lines.append("    postgres_db:")
            for key, value in pg["postgres_db"].items():
                if key == "password":
                    lines += ["      password:", f"        env: {value['env']}"]
                else:
                    lines.append(f"      {key}: {_y(value)}")
    return "\n".join(lines) + "\n"


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
