"""The ``dagster.yaml`` of a kprio deployment: Dagster's instance settings as a typed structure.

:class:`InstanceSettings` holds them under Dagster's key names (run monitoring and retries, the run queue, the
concurrency limits that enforce ``planner.max_in_flight``, telemetry and the first-visit modal off, storage);
:func:`dagster_yaml` dumps them, each top-level block under its field's description as a comment.

>>> from kprio_core.config import KprioConfig
>>> cfg = KprioConfig.model_validate({"topics": [{"name": "orders", "priorities": 3},
...                                              {"name": "audit", "priorities": 2}],
...                                   "planner": {"max_in_flight": 2}})
>>> total_slots(cfg)
10
>>> [(limit.key, limit.limit) for limit in tag_concurrency_limits(cfg)]
[('kprio/slot-p0', 2), ('kprio/slot-p1', 2), ('kprio/slot-p2', 2), ('dagster/partition', 1)]
>>> pg = postgres_storage("postgresql+psycopg://kprio:s3cret@db.internal:6432/dagster?sslmode=require")
>>> pg.model_dump(exclude_none=True)["postgres_db"]
{'username': 'kprio', 'hostname': 'db.internal', 'port': 6432, 'db_name': 'dagster',
 'scheme': 'postgresql+psycopg2', 'params': {'sslmode': 'require'}, 'password': {'env': 'KPRIO_DAGSTER_PG_PASSWORD'}}
>>> postgres_storage("postgresql://kprio@db/dagster?password=s3cret").model_dump(exclude_none=True)["postgres_db"]
{'username': 'kprio', 'hostname': 'db', 'port': 5432, 'db_name': 'dagster', 'scheme': 'postgresql+psycopg2',
 'password': {'env': 'KPRIO_DAGSTER_PG_PASSWORD'}}
>>> print(render(instance_settings(cfg)).split("\\n\\n")[1])
# No usage statistics sent to Dagster Labs.
telemetry:
  enabled: false
"""

from __future__ import annotations

import textwrap
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from kprio_core.config import KprioConfig
from kprio_core.errors import UsageError
from orchestration.dagster.tags import PARTITION_TAG
from orchestration.runtime.tags import SLOT_TAG_PREFIX

DEFAULT_PG_PASSWORD_ENV = "KPRIO_DAGSTER_PG_PASSWORD"
URL_OPTION = "--postgres-url"
PG_SCHEME = "postgresql+psycopg2"
"""dagster-postgres binds NOTIFY parameters client-side, which only psycopg2 does; SQLAlchemy 2.1's
plain ``postgresql://`` means psycopg 3 (server-side binding: ``syntax error at or near "$1"``)."""


def total_slots(config: KprioConfig) -> int:
    """Priority slots of every logical topic: sum of priorities x ``planner.max_in_flight``."""
    return sum(t.priorities for t in config.topics) * config.planner.max_in_flight


# --- the settings, as Dagster's instance schema names them ---------------------------------------


class _Block(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Enabled(_Block):
    enabled: bool


class RunLauncherBlock(_Block):
    """Dagster's ``run_launcher`` block: a class by its module and name."""

    module: str = "orchestration.dagster.workers.launcher"
    class_: str = Field("WarmRunLauncher", alias="class")


class RunMonitoring(_Block):
    enabled: bool = True
    poll_interval_seconds: int = 5  # a run whose process died is failed within a few of these
    start_timeout_seconds: int = 180  # code server load + run worker + imports
    cancel_timeout_seconds: int = 60
    max_runtime_seconds: int = 3600  # generous: kprio sizes batches to seconds (planner.target_batch_s)
    max_resume_run_attempts: int = 0
    free_slots_after_run_end_seconds: int = 10


class RunRetries(_Block):
    enabled: bool
    max_retries: int
    retry_on_asset_or_op_failure: bool = True


class RunQueue(_Block):
    dequeue_interval_seconds: int = 1
    dequeue_use_threads: bool = True
    dequeue_num_workers: int = 4
    max_user_code_failure_retries: int = 3
    user_code_failure_retry_delay: int = 5


class PerUniqueValue(_Block):
    per_unique_value: bool = Field(True, alias="applyLimitPerUniqueValue")


class TagLimit(_Block):
    """At most ``limit`` runs in progress per value of the tag ``key``."""

    key: str
    value: PerUniqueValue = PerUniqueValue()
    limit: int


class RunLimits(_Block):
    max_concurrent_runs: int
    tag_concurrency_limits: tuple[TagLimit, ...]


class Pools(_Block):
    granularity: Literal["run", "op"] = "run"
    default_limit: int


class Concurrency(_Block):
    runs: RunLimits
    pools: Pools


class Workers(_Block):
    use_threads: bool = True
    num_workers: int
    num_submit_workers: int


class PurgeAfterDays(_Block):
    skipped: int = 1
    success: int = 7
    failure: int = 30
    started: int = 7


class SensorRetention(_Block):
    purge_after_days: PurgeAfterDays = PurgeAfterDays()


class Retention(_Block):
    sensor: SensorRetention = SensorRetention()


class FromEnv(_Block):
    """A value Dagster reads from the environment variable ``env`` when the instance loads."""

    env: str


class PostgresDb(_Block):
    username: str
    hostname: str
    port: int = 5432
    db_name: str
    scheme: str = PG_SCHEME
    params: dict[str, str] | None = None
    password: FromEnv | None = None


class Postgres(_Block):
    """Either the whole URL from a variable, or its parts (the password from a variable)."""

    postgres_url: FromEnv | None = None
    postgres_db: PostgresDb | None = None


class Storage(_Block):
    postgres: Postgres


class InstanceSettings(_Block):
    """The ``dagster.yaml`` of a kprio deployment; each field's description is the comment written above it."""

    telemetry: Enabled = Field(Enabled(enabled=False), description="No usage statistics sent to Dagster Labs.")
    nux: Enabled = Field(Enabled(enabled=False), description='No "Join the community" modal on the UI\'s first visit.')
    run_launcher: RunLauncherBlock | None = Field(RunLauncherBlock(), description=(
        "kprio's run launcher: every run (the sensor's, a backfill's, the UI's) executes on a warm worker of this "
        "home's pool, a long-lived process with Dagster, Great Expectations and kprio imported and a Spark client "
        "warm (kprio.yaml's `workers:` settings), started with the code location. Delete this block for Dagster's "
        "DefaultRunLauncher: a new process per run, asked of the code server."))
    run_monitoring: RunMonitoring = Field(RunMonitoring(), description=(
        "Run monitoring (a daemon: `dagster dev` or `dagster-daemon run`). kprio's launcher answers its health "
        "check: a run whose worker died (kill -9, OOM) is FAILURE (its pool failed it already, and kprio's tick "
        "resumes its batch). With the DefaultRunLauncher a run executes in a child process of the code server, which "
        "fails the run as soon as that process is gone; nothing sees a dead run whose code server died with it "
        "(machine loss): the daemon fails those only at max_runtime_seconds, a generous bound on any run (kprio "
        "batches take seconds); kprio's batch lease (recovery.lease_s) retries their batches long before that. "
        "A run still STARTING after start_timeout_seconds is failed, one still CANCELING after "
        "cancel_timeout_seconds is marked canceled. Neither launcher resumes a run in a new worker "
        "(max_resume_run_attempts 0): it fails it, then retries it. Op-granularity pool slots a run still claims "
        "after it ended are freed after free_slots_after_run_end_seconds (kprio's own pool counts runs and claims "
        "none)."))
    run_retries: RunRetries = Field(description=(
        "A failed run is re-executed by the daemon, up to recovery.max_attempts attempts in all (max_retries = "
        "max_attempts - 1); asset and op failures too (a failed drain or commit is retried)."))
    run_queue: RunQueue = Field(RunQueue(), description=(
        "The QueuedRunCoordinator (Dagster's default): every run (sensor, backfill, UI, retry) waits in the queue "
        "until the limits under `concurrency:` let it start. The queue is looked at every second, so a freed slot "
        "is used within about a second; dequeued runs are launched in parallel threads; a code server that is "
        "reloading does not fail the runs dequeued meanwhile (retried 3 times, 5 s apart)."))
    concurrency: Concurrency = Field(description=(
        "What may run at once: the queue starts a run only within the `runs:` limits and, when the run uses a "
        "pool, within `pools:`. Runs that wait stay QUEUED and the UI says why. max_concurrent_runs: runs in "
        "progress at once on this instance, whatever they are (at least 10). tag_concurrency_limits: "
        "planner.max_in_flight runs per priority slot of each logical topic (a run carries "
        "kprio/slot-p<n>=<logical topic> for every priority it drains), and one run per batch partition at a "
        "time, whatever launched it. The drain op declares pool `kprio_drain`; a pool without a limit of its own "
        "(set with `dagster instance concurrency set`) gets default_limit. Run granularity: the queue starts a run "
        "using the pool only while fewer than sum(priorities) x max_in_flight runs using it are in progress. It "
        "counts runs, it stores no slot claims: op granularity would leave the slot of a killed run "
        "(`kprio drain`, kill -9) claimed until a daemon freed it, and the next drain would wait for it. Runs "
        "`kprio drain` launches, and those a worker's tick requests after a commit, bypass the queue: kprio's ledger "
        "holds them to planner.max_in_flight, and the workers run at most workers.count of them at once, the urgent "
        "lane's worker kept for the most urgent priorities."))
    sensors: Workers = Field(Workers(num_workers=4, num_submit_workers=4), description=(
        "The sensor daemon evaluates sensors every 5 s at most (Dagster's loop); threads keep a slow tick from "
        "delaying the others, and the runs of one tick are submitted in parallel."))
    backfills: Workers = Field(Workers(num_workers=2, num_submit_workers=2), description=(
        "Backfills (UI re-drains of chosen batches): submitted in parallel threads as well."))
    retention: Retention = Field(Retention(), description=(
        "A sensor ticking every few seconds (sensor.interval_s) writes thousands of ticks a day: keep a week of "
        "them."))
    storage: Storage | None = Field(None, description=(
        "Storage. Without this key: Dagster's default, SQLite files in this directory (history/, storage/, "
        "schedules/); for production use Postgres (kprio instance init --postgres-url ...): runs, event logs and "
        "schedules in PostgreSQL (dagster-postgres, which needs the psycopg2 driver). No password is written "
        "here: it is read from the environment when the instance loads."))


def tag_concurrency_limits(config: KprioConfig) -> list[TagLimit]:
    """One limit per priority slot tag (``max_in_flight`` runs per logical topic), one run per batch."""
    top = max(t.priorities for t in config.topics)
    limits = [TagLimit(key=f"{SLOT_TAG_PREFIX}{p}", limit=config.planner.max_in_flight) for p in range(top)]
    return [*limits, TagLimit(key=PARTITION_TAG, limit=1)]


def postgres_storage(url: str | None = None, *, url_env: str | None = None,
                     password_env: str | None = None) -> Postgres:
    """Dagster's ``storage: postgres:`` block; never a password, only the variable that holds it.

    ``url_env``: the variable the whole URL is read from at load (it must name the psycopg2 driver:
    ``postgresql+psycopg2://...``). ``url``: its parts are written, any driver replaced by psycopg2; a password in
    any form (``user:pass@``, a secret parameter: :func:`kprio_core.urls.url_secrets`), or ``password_env``, becomes
    ``password: {env: <password_env, default KPRIO_DAGSTER_PG_PASSWORD>}``; secret parameters are never written.
    """
    import re

    for option, variable in (("--postgres-url-env", url_env), ("--postgres-password-env", password_env)):
        if variable is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", variable):
            raise UsageError(f"{variable!r} is not the name of an environment variable (letters, digits and _)",
                             where=option)
    if url_env is not None:
        return Postgres(postgres_url=FromEnv(env=url_env))
    if url is None:
        raise UsageError("postgres storage needs a URL or the environment variable that holds one", where=URL_OPTION)
    from sqlalchemy.exc import ArgumentError

    from kprio_core.urls import parsed_url, secret_parameters, url_secrets

    try:
        parsed = parsed_url(url)
    except ArgumentError:  # its text never echoes the URL, nor do we: it may hold the password
        raise UsageError("is not a URL: expected postgresql://user@host[:port]/dbname", where=URL_OPTION) from None
    except ValueError:  # a port that is no number
        raise UsageError("its port is not a number: expected postgresql://user@host[:port]/dbname",
                         where=URL_OPTION) from None
    if not parsed.drivername.startswith("postgres"):
        raise UsageError(f"must start with postgresql://, not {parsed.drivername}://", where=URL_OPTION)
    if not (parsed.username and parsed.host and parsed.database):
        raise UsageError("needs a user, a host and a database: postgresql://user@host:5432/dbname", where=URL_OPTION)
    if parsed.port is not None and not 0 < parsed.port < 65536:
        raise UsageError(f"port {parsed.port} is not a TCP port", where=URL_OPTION)
    hidden = set(secret_parameters(parsed))
    plain = {parsed.password, *(v for k in hidden for v in ([parsed.query[k]] if isinstance(parsed.query[k], str)
                                                           else parsed.query[k]))}
    if any(secret not in plain for secret in url_secrets(parsed)):  # a password= inside ?options= or the database
        raise UsageError("holds a password inside its database name or a parameter's value (password=...): remove it "
                         "and give the password in the variable --postgres-password-env names", where=URL_OPTION)
    params = {k: v if isinstance(v, str) else ",".join(v) for k, v in parsed.query.items() if k not in hidden} or None
    password = None
    if url_secrets(parsed) or password_env is not None:
        password = FromEnv(env=password_env or DEFAULT_PG_PASSWORD_ENV)
    return Postgres(postgres_db=PostgresDb(username=parsed.username, hostname=parsed.host, port=parsed.port or 5432,
                                           db_name=parsed.database, params=params, password=password))


def instance_settings(config: KprioConfig, storage: Postgres | None = None) -> InstanceSettings:
    """kprio's instance settings for ``config``: retries from ``recovery``, limits from the topics and ``planner``."""
    retries = config.recovery.max_attempts - 1
    slots = total_slots(config)
    return InstanceSettings(
        run_retries=RunRetries(enabled=retries > 0, max_retries=retries),
        concurrency=Concurrency(
            runs=RunLimits(max_concurrent_runs=max(10, slots), tag_concurrency_limits=tag_concurrency_limits(config)),
            pools=Pools(default_limit=slots),
        ),
        storage=None if storage is None else Storage(postgres=storage),
    )


HEADER = """\
# Dagster instance settings of a kprio deployment, written by `kprio instance init`
# (orchestration/dagster/instance_yaml.py). Edit freely: kprio never overwrites an existing file
# unless asked with `kprio instance init --force`.
"""


def render(settings: InstanceSettings) -> str:
    """``settings`` as YAML, each top-level block under its field's description as a comment."""
    parts = [HEADER]
    for name, field in InstanceSettings.model_fields.items():
        comment = "".join(f"# {line}\n" for line in textwrap.wrap(field.description or "", 96))
        value = getattr(settings, name)
        block = {} if value is None else {name: value.model_dump(mode="json", by_alias=True, exclude_none=True)}
        parts.append(comment + (yaml.safe_dump(block, sort_keys=False) if block else ""))
    return "\n".join(parts)


def dagster_yaml(config: KprioConfig, *, postgres_url: str | None = None, postgres_url_env: str | None = None,
                 postgres_password_env: str | None = None) -> str:
    """The ``dagster.yaml`` of a kprio deployment, each block under a comment that says why; storage is SQLite
    under the home unless a Postgres URL (or the variable holding it) is given (:func:`postgres_storage`)."""
    storage = None
    if postgres_url is not None or postgres_url_env is not None:
        storage = postgres_storage(postgres_url, url_env=postgres_url_env, password_env=postgres_password_env)
    return render(instance_settings(config, storage))
