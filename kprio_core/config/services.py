"""Where kprio's parts run: the ``spark``, ``workers``, ``ledger`` and ``schema_registry`` sections."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from kprio_core.config.base import Section, SettingError, a_path, a_url
from kprio_core.config.environment import ENV_LEDGER_PASSWORD, ENV_REGISTRY_KEY_PASSWORD, ENV_REGISTRY_PASSWORD

if TYPE_CHECKING:
    from kprio_core.model.registry import RegistryEndpoint


class SparkReader(StrEnum):
    """How the drain reads the plan's offset ranges (``spark.reader``)."""

    PYTHON = "python"
    """kprio's PySpark data source (confluent-kafka on the executors, :mod:`spark_jobs.source`)."""
    NATIVE = "native"
    """Spark's own ``kafka`` source (its connector jar, :mod:`spark_jobs.native`)."""


SPARK_MASTERS = tuple(re.compile(form) for form in (
    r"local", r"local\[([1-9]\d*|\*)\]", r"local\[([1-9]\d*|\*)\s*,\s*[1-9]\d*\]",
    r"local-cluster\[\s*[1-9]\d*\s*,\s*[1-9]\d*\s*,\s*[1-9]\d*\s*\]",
    r"spark://[^/\s:,]+:\d+(,[^/\s:,]+:\d+)*", r"yarn", r"k8s://\S+",
))
"""The master URLs SparkContext accepts (its ``createTaskScheduler``): counts of at least 1; standalone masters
(several for ZooKeeper's failover) with a port."""


class SparkSettings(Section):
    """Where Spark runs and how it reads Kafka."""

    master: str = Field("local[*]", description="spark.master URL.")
    remote: str | None = Field(None, description="Spark Connect URL (sc://host:port); wins over master.")
    reader: SparkReader = Field(SparkReader.PYTHON, description="python data source or Spark's kafka source.")
    conf: dict[str, str] = Field(default_factory=dict, description="Extra Spark settings.")
    fetch_max_bytes: int = Field(16 * 1024 * 1024, ge=1024, description="fetch.max.bytes of the executors' consumers.")
    max_partition_fetch_bytes: int = Field(4 * 1024 * 1024, ge=1024, description="max.partition.fetch.bytes of the executors' consumers.")
    queued_max_messages_kbytes: int = Field(16 * 1024, ge=1, description="queued.max.messages.kbytes: the consumer's prefetch bound.")
    arrow_batch_records: int = Field(10_000, ge=1, description="Records per Arrow batch a read task yields.")
    connect_port: int = Field(
        15002, ge=1, le=65535, description="Port of the Spark Connect server `kprio spark start` runs (use "
        "remote: sc://localhost:<port> to drain through it)."
    )
    connect_dir: str = Field(
        "./kprio-data/spark-connect", description="State and log directory of the Spark Connect server kprio starts."
    )

    @field_validator("connect_dir")
    @classmethod
    def _a_path(cls, value: str) -> str:
        return a_path(value)

    @field_validator("conf")
    @classmethod
    def _no_master_nor_secret(cls, value: dict[str, str]) -> dict[str, str]:
        """No spark.master/spark.remote (settings of their own: the drain would see two), no credential (it would
        sit in kprio.yaml and Dagster's config page)."""
        for name in value:
            if name.strip() in ("spark.master", "spark.remote"):
                raise SettingError(f"set {name.strip().replace('spark.', 'spark.', 1)} as a setting of the spark "
                                   f"section ({name.strip().split('.')[1]}:), not in spark.conf", key=name)
            if _spark_secret(name):
                raise SettingError("is a credential: set it in Spark's own spark-defaults.conf ($SPARK_CONF_DIR) "
                                   "or the cluster's secrets, never in kprio.yaml", key=name)
            if "://" in value[name]:  # spark.jars.repositories, spark.eventLog.dir, an endpoint, ...
                try:
                    a_url(value[name], secrets="set it in Spark's own spark-defaults.conf ($SPARK_CONF_DIR) or the "
                          "cluster's secrets, never in kprio.yaml")
                except ValueError as err:
                    raise SettingError(str(err), key=name) from None
        return value

    @field_validator("master")
    @classmethod
    def _a_master_spark_accepts(cls, value: str) -> str:
        ports = [int(p) for p in re.findall(r":(\d+)", value)] if value.startswith("spark://") else []
        if not any(form.fullmatch(value) for form in SPARK_MASTERS) or not all(0 < p < 65536 for p in ports):
            raise ValueError(f"{value!r} is not a master URL Spark accepts: local, local[N], local[*], local[N,F], "
                             "local-cluster[N,C,M] (each at least 1), spark://host:port, yarn or k8s://https://host:port "
                             "(a Spark Connect server is spark.remote: sc://host:port)")
        return value

    @field_validator("remote")
    @classmethod
    def _a_spark_connect_url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        parts = urlsplit(value)
        if parts.scheme != "sc" or not parts.hostname or "@" in parts.netloc:
            raise ValueError("is not a Spark Connect URL: write sc://host:port (port 15002 when left out)")
        try:
            parts.port  # noqa: B018 - a port that is no number raises here
        except ValueError:
            raise ValueError("is not a Spark Connect URL: its port is not a number (sc://host:port)") from None
        named = [p.split("=", 1)[0].strip().lower() for p in parts.path.split(";")[1:]]
        if "token" in named:
            raise ValueError("holds a token: remove ;token=... from the URL and set it in the environment as "
                             "SPARK_CONNECT_AUTHENTICATE_TOKEN")
        return value


def _spark_secret(name: str) -> bool:
    """Whether a Spark setting holds a credential (a password, secret, token; not a class that provides one).

    >>> [_spark_secret(n) for n in ("spark.ssl.keyPassword", "spark.authenticate.secret",
    ...  "spark.hadoop.fs.s3a.secret.key", "spark.hadoop.fs.s3a.session.token",
    ...  "spark.hadoop.fs.s3a.aws.credentials.provider", "spark.hadoop.fs.s3a.delegation.token.binding")]
    [True, True, True, True, False, False]
    """
    key = name.lower()
    return ("password" in key or "passwd" in key or key.endswith((".secret", "secret.key", ".token", "access.key"))
            or ".secret." in key)


class WorkersSettings(Section):
    """The warm run workers: long-lived processes executing every run of a batch (Dagster's run launcher, ``kprio
    drain``), with their imports done and a Spark client warm."""

    count: int = Field(2, ge=1, le=64, description="Workers, so runs at once. With 2 or more, the first is kept "
                       "for runs that drain a logical topic's most urgent priority (the urgent lane) and the others "
                       "run the bulk, with a lower CPU priority (bulk_nice).")
    bulk_nice: int = Field(10, ge=0, le=19, description="How much nicer (lower CPU priority) the bulk lane's "
                           "workers, their Spark JVM and its Python workers run than the urgent lane's.")
    max_runs: int = Field(200, ge=1, description="A worker is replaced by a fresh one after this many runs.")
    max_rss_mib: int = Field(4096, ge=256, description="A worker is replaced after a run that left it (with its "
                             "Spark JVM and Python workers) above this resident memory, in MiB.")
    start_timeout_s: float = Field(180.0, gt=0, le=3600, description="Longest a new worker may take to import "
                                   "and start its Spark client before it is counted as failed.")


class LedgerSettings(Section):
    """Where the batch ledger lives."""

    url: str = Field("sqlite:///./kprio-data/ledger.db",
                     description="SQLAlchemy URL of the batch ledger, without a password: a PostgreSQL ledger's "
                                 f"password is read from {ENV_LEDGER_PASSWORD} in the environment.")

    @field_validator("url")
    @classmethod
    def _a_ledger_url(cls, value: str) -> str:
        """A SQLite or PostgreSQL URL with no password in any form (it would sit in kprio.yaml and Dagster's page).

        >>> from pydantic import ValidationError
        >>> from kprio_core.config.load import format_validation_error
        >>> LedgerSettings(url="postgresql+psycopg://kprio@db/kprio").url
        'postgresql+psycopg://kprio@db/kprio'
        >>> for url in ("postgresql+psycopg://kprio:hunter2@db/kprio", "postgresql://kprio@db/kprio?password=hunter2",
        ...             "mysql://u@db/kprio", "no url"):
        ...     try:
        ...         LedgerSettings(url=url)
        ...     except ValidationError as err:
        ...         print(format_validation_error(err, "kprio.yaml"))
        url: holds a password: remove it from the URL (postgresql+psycopg://kprio@db/kprio) and set it in the
        environment as KPRIO_LEDGER_PASSWORD (kprio.yaml)
        url: holds a password: remove it from the URL (postgresql://kprio@db/kprio) and set it in the environment
        as KPRIO_LEDGER_PASSWORD (kprio.yaml)
        url: the batch ledger runs on SQLite or PostgreSQL, not mysql (mysql://u@db/kprio) (kprio.yaml)
        url: is not a SQLAlchemy URL: write sqlite:///path/to/ledger.db or postgresql+psycopg://user@host:5432/db
        (kprio.yaml)
        """
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError

        from kprio_core.urls import bare_url, parsed_url, url_secrets

        try:
            parsed = parsed_url(value)
        except (ArgumentError, ValueError):  # their text never echoes the URL, nor do we: it may hold a password
            raise ValueError("is not a SQLAlchemy URL: write sqlite:///path/to/ledger.db or "
                             "postgresql+psycopg://user@host:5432/db") from None
        if url_secrets(parsed):
            raise ValueError(f"holds a password: remove it from the URL ({bare_url(parsed)}) and set it in the "
                             f"environment as {ENV_LEDGER_PASSWORD}")
        backend = parsed.get_backend_name()
        if backend not in ("sqlite", "postgresql"):
            raise ValueError(f"the batch ledger runs on SQLite or PostgreSQL, not {backend} ({bare_url(parsed)})")
        if backend == "sqlite":
            _a_sqlite_file(value, parsed.database or "")
        else:
            _libpq_parameters(parsed)
        try:
            parsed.get_dialect()
        except NoSuchModuleError:
            raise ValueError(f"SQLAlchemy has no driver {parsed.drivername!r}: write sqlite:///path or "
                             "postgresql+psycopg://user@host:5432/db") from None
        return value


def _a_sqlite_file(value: str, database: str) -> None:
    """A SQLite ledger is a file: one in memory would be gone when the command ends."""
    if database in ("", ":memory:") or "mode=memory" in database:
        raise ValueError(f"{value!r} is a SQLite database in memory, gone when the command ends: name a file, "
                         "sqlite:///path/to/ledger.db")
    a_path(database)


def _libpq_parameters(parsed: Any) -> None:
    """A PostgreSQL URL's query holds only libpq's parameters and sslmodes: the driver would refuse others only on
    connecting, in words naming no setting (an internal error, a database that does not answer)."""
    from kprio_core.urls import bare_url

    unknown = sorted(set(parsed.query) - _libpq_keywords())
    if unknown:
        raise ValueError(f"{', '.join(unknown)} is no connection parameter of PostgreSQL's (libpq's) "
                         f"({bare_url(parsed)})")
    sslmode = parsed.query.get("sslmode")
    if sslmode is not None and sslmode not in _SSLMODES:
        raise ValueError(f"sslmode={sslmode} is none of libpq's: {', '.join(_SSLMODES)} ({bare_url(parsed)})")


_SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")


def _libpq_keywords() -> set[str]:
    """The connection parameters libpq takes in a URL's query (SQLAlchemy's own, such as ``host``, among them)."""
    try:
        from psycopg import pq

        return {option.keyword.decode() for option in pq.Conninfo.get_defaults()}
    except ImportError:  # psycopg 2 only: its parse of a DSN knows the same keywords
        return _LIBPQ_KEYWORDS


_LIBPQ_KEYWORDS = frozenset({
    "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "channel_binding", "connect_timeout",
    "client_encoding", "options", "application_name", "fallback_application_name", "keepalives", "keepalives_idle",
    "keepalives_interval", "keepalives_count", "tcp_user_timeout", "replication", "gssencmode", "sslmode",
    "requiressl", "sslcompression", "sslcert", "sslkey", "sslpassword", "sslcertmode", "sslrootcert", "sslcrl",
    "sslcrldir", "sslsni", "requirepeer", "ssl_min_protocol_version", "ssl_max_protocol_version", "krbsrvname",
    "gsslib", "gssdelegation", "service", "target_session_attrs", "load_balance_hosts", "require_auth",
})


class SchemaRegistrySettings(Section):
    """The schema registry of Avro topics (a Confluent-compatible API); secrets only from the environment."""

    url: str = Field(min_length=1, description="Base URL of the Confluent-compatible API, without credentials, e.g. "
                     "http://127.0.0.1:8081/apis/ccompat/v7 (kprio registry start prints it).")
    username: str | None = Field(None, description="Basic auth user; the password is read from "
                                 f"{ENV_REGISTRY_PASSWORD} in the environment.")
    ssl_ca_location: str | None = Field(None, description="PEM file of the CA certificates that sign the "
                                        "registry's certificate (https; default: the system's).")
    ssl_certificate_location: str | None = Field(None, description="PEM file of kprio's client certificate (mTLS).")
    ssl_key_location: str | None = Field(None, description="PEM file of the client certificate's key; its password, "
                                         f"if any, from {ENV_REGISTRY_KEY_PASSWORD}.")
    timeout_s: float = Field(10.0, gt=0, le=300, description="Bound of one request to the registry.")

    @model_validator(mode="before")
    @classmethod
    def _no_secrets_in_file(cls, value: object) -> object:
        if isinstance(value, Mapping):
            for key, variable in (("password", ENV_REGISTRY_PASSWORD), ("ssl_key_password", ENV_REGISTRY_KEY_PASSWORD)):
                if key in value:
                    raise ValueError(f"'{key}' is a secret: remove it from the file and set it in the environment "
                                     f"as {variable}")
        return value

    @field_validator("url")
    @classmethod
    def _plain_url(cls, value: str) -> str:
        """An http(s) URL with no credentials in it, held to :func:`~kprio_core.config.base.a_url`.

        >>> from pydantic import ValidationError
        >>> from kprio_core.config.load import format_validation_error
        >>> SchemaRegistrySettings(url="https://sr.example:8081").url
        'https://sr.example:8081'
        >>> for url in ("https://u:pw@sr.example", "sr.example:8081"):
        ...     try:
        ...         SchemaRegistrySettings(url=url)
        ...     except ValidationError as err:
        ...         print(format_validation_error(err, "kprio.yaml"))
        url: holds credentials: remove them from the URL (https://sr.example) and set schema_registry.username and
        KPRIO_SCHEMA_REGISTRY_PASSWORD (kprio.yaml)
        url: is not an http(s) URL: write http://host:port[/path] (kprio.yaml)
        >>> SchemaRegistrySettings(url="http://sr.example:port/apis/ccompat/v7")
        Traceback (most recent call last):
        ...
        pydantic_core._pydantic_core.ValidationError: 1 validation error for SchemaRegistrySettings
        url
          Value error, has a port that is not a number from 1 to 65535 ...
        """
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("is not an http(s) URL: write http://host:port[/path]")
        if parts.username or parts.password:
            bare = parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]).geturl()
            raise ValueError(f"holds credentials: remove them from the URL ({bare}) and set schema_registry.username "
                             f"and {ENV_REGISTRY_PASSWORD}")
        return a_url(value, secrets=f"remove it and set schema_registry.username and {ENV_REGISTRY_PASSWORD}")

    def endpoint(self, env: Mapping[str, str] | None = None) -> RegistryEndpoint:
        """Where and how to reach the registry, its secrets from the environment (never log its password).

        Read when a batch starts, on its driver (as a ``dg.EnvVar`` is in the run); an empty variable is unset.

        >>> settings = SchemaRegistrySettings(url="https://sr.example:8081", username="kprio")
        >>> settings.endpoint({ENV_REGISTRY_PASSWORD: "s3cret"}).password, settings.endpoint({ENV_REGISTRY_PASSWORD: ""})
        ('s3cret', RegistryEndpoint(https://sr.example:8081, user kprio))
        >>> settings.endpoint({ENV_REGISTRY_PASSWORD: ""}).password is None
        True
        """
        from kprio_core.model.registry import RegistryEndpoint

        env = os.environ if env is None else env
        return RegistryEndpoint(self.url, username=self.username,
                                password=(env.get(ENV_REGISTRY_PASSWORD) or None) if self.username else None,
                                ca_location=self.ssl_ca_location, certificate_location=self.ssl_certificate_location,
                                key_location=self.ssl_key_location,
                                key_password=env.get(ENV_REGISTRY_KEY_PASSWORD) or None, timeout_s=self.timeout_s)
