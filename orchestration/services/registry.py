"""The embedded schema registry: Apicurio Registry, built from Maven Central, run as a process in a data dir.

One detached JVM, ``java -jar quarkus-run.jar`` of the application :mod:`orchestration.services.registry_build`
put in kprio's cache, bound to 127.0.0.1; clients speak the Confluent-compatible API at
``http://127.0.0.1:<port>/apis/ccompat/v7``. Its store is H2 in the data dir, so a record's schema id still resolves
after a restart. H2 writes each commit before the registry answers (``WRITE_DELAY=0``: with H2's default delay a
killed registry lost schemas a serializer was told were registered), and a restarted registry is ready once it
serves every subject it held when it stopped (else it is stopped again, saying so: left serving, it would turn
the records naming them into dead letters).

A data dir holds::

    registry.log          the JVM's output
    db/                   the H2 database (schemas, versions, ids, compatibility settings)
    kprio-registry.json   while it runs: port, pid and start time, for status/stop from another process
    kprio-registry-held.json  from a stop to the next start: how many subjects it held then

A state file whose process is gone is stale: removed, never blocking a start. A pid counts only while it is this
data dir's JVM started at the recorded time.

Secured (``tls``, ``users``) as in production: https only with a PEM certificate and key, and HTTP basic auth on
every API request (Apicurio's ``registry.auth.enabled`` over Quarkus's embedded realm, which the build adds;
``/health`` stays open). A password never reaches a file or the command line: it names a variable
(``${KPRIO_REGISTRY_USER_PASSWORD_0}``, expanded by Quarkus) only the JVM's environment holds.

Differences from Confluent Schema Registry (Apicurio 2.4.2.Final): the global compatibility default is NONE
(``PUT /config`` changes it); a 409 for an incompatible schema carries ``error_code: 0``.

>>> r = EmbeddedRegistry("/tmp/kprio-doc-registry", port=18081)
>>> r.url, r.status().running
('http://127.0.0.1:18081/apis/ccompat/v7', False)
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from kprio_core.errors import KprioError
from kprio_core.java import find_java
from orchestration.services.broker.ports import port_free
from orchestration.services.process import (
    StateFile,
    data_dir_lock,
    free_port,
    live_process,
    log_tail,
    spawn_detached,
    stop_process,
    wait_for,
)

DEFAULT_DATA_DIR = Path("kprio-data/registry")
DEFAULT_PORT = 8081
LOG_FILE = "registry.log"
STATE_FILE = "kprio-registry.json"
HELD_FILE = "kprio-registry-held.json"
LOCK_FILE = ".kprio-registry.lock"
DB_DIR = "db"
CCOMPAT_PATH = "/apis/ccompat/v7"
HEALTH_PATH = "/health/ready"
ENV_JVM_OPTIONS = "KPRIO_REGISTRY_JVM_OPTS"
"""Extra JVM options for the embedded registry, after kprio's own (a later ``-Xmx`` wins)."""

PASSWORD_VARIABLE = "KPRIO_REGISTRY_USER_PASSWORD_{}"
"""The JVM's environment variable of the n-th user's password (the command line names it, never holds it)."""
USER_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""A user name Quarkus's embedded realm takes as one key of its map (no dot, no quote)."""

JVM_OPTIONS = ("-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:+ExitOnOutOfMemoryError",
               "-Djava.awt.headless=true")
"""As the embedded broker's: a small heap and the C1 compiler start it fastest on two busy cores."""


class RegistryProcessError(KprioError):
    """The embedded schema registry could not be started, reached or stopped."""

    code = "embedded_registry"


@dataclass(frozen=True)
class RegistryTls:
    """The certificate a secured registry serves https with: PEM files, the key unencrypted (as Quarkus 2.16 reads
    it; keep it owner-only). The certificate must name the host the registry listens on."""

    certificate: Path
    key: Path


@dataclass(frozen=True)
class RegistryState:
    """What the state file records: where it listens and which process it is."""

    port: int
    pid: int | None = None
    created_at: float | None = None  # psutil create time: a reused pid has another
    version: str | None = None
    scheme: str = "http"
    users: tuple[str, ...] = ()  # the names of a secured one's users, never their passwords


@dataclass(frozen=True)
class RegistryStatus:
    """Whether a registry runs in a data dir, and where."""

    data_dir: Path
    running: bool
    port: int | None = None
    pid: int | None = None
    host: str = "127.0.0.1"
    log: Path | None = None
    version: str | None = None
    scheme: str = "http"

    @property
    def url(self) -> str | None:
        """The Confluent-compatible API's base URL (what ``schema_registry.url`` takes)."""
        return f"{self.scheme}://{self.host}:{self.port}{CCOMPAT_PATH}" if self.port is not None else None

    def describe(self) -> str:
        if not self.running:
            return f"embedded schema registry: stopped (data dir {self.data_dir})"
        return (f"embedded schema registry: running at {self.url} (Apicurio Registry {self.version}, "
                f"pid {self.pid}, data dir {self.data_dir})")


def answers(base: str, timeout_s: float = 2.0, auth: tuple[str, str] | None = None) -> bool:
    """Whether the registry at ``base`` (``http(s)://host:port``) is ready and serves ccompat (as ``auth``'s user)."""
    import httpx

    try:
        # Not verified: a probe of the process this data dir runs, on loopback; clients verify it with their CA.
        with httpx.Client(timeout=timeout_s, auth=auth, verify=not base.startswith("https:")) as client:
            return (client.get(f"{base}{HEALTH_PATH}").status_code == 200
                    and client.get(f"{base}{CCOMPAT_PATH}/subjects").status_code == 200)
    except httpx.HTTPError:
        return False


class EmbeddedRegistry:
    """Apicurio Registry on ``port`` (None or 0: a free one) of ``host``, state in ``data_dir``; https only with
    ``tls``, and every API request needs the password of one of ``users`` (user -> password), if any."""

    def __init__(self, data_dir: str | os.PathLike = DEFAULT_DATA_DIR, port: int | None = None, *,
                 host: str = "127.0.0.1", start_timeout_s: float = 60.0, stop_timeout_s: float = 10.0,
                 tls: RegistryTls | None = None, users: Mapping[str, str] | None = None) -> None:
        self.data_dir = Path(data_dir).absolute()
        self.port = port or None
        self.host = host
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.tls = tls
        self._users = dict(users or {})
        bad = [name for name in self._users if not USER_NAME.fullmatch(name)]
        if bad:
            raise RegistryProcessError(f"embedded schema registry user {bad[0]!r}: write letters, digits, _ or - "
                                       "(at most 64)")
        if any(not password for password in self._users.values()):
            raise RegistryProcessError("an embedded schema registry user has an empty password")

    def __repr__(self) -> str:
        users = f", users {sorted(self._users)}" if self._users else ""
        return f"EmbeddedRegistry({self.data_dir}, {self._scheme}{users})"

    @property
    def _scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    @property
    def log_path(self) -> Path:
        return self.data_dir / LOG_FILE

    @property
    def state_path(self) -> Path:
        return self.data_dir / STATE_FILE

    @property
    def url(self) -> str:
        """The Confluent-compatible API's base URL."""
        state = self._read_state()
        port = state.port if state else self.port
        if port is None:
            raise RegistryProcessError(f"embedded schema registry in {self.data_dir} has no port yet: start it first")
        return f"{state.scheme if state else self._scheme}://{self.host}:{port}{CCOMPAT_PATH}"

    # -- state ------------------------------------------------------------------------------------

    def _java(self) -> str:
        java = find_java()
        if java is None:
            raise self._error("Java is not installed (no java on PATH, no $JAVA_HOME/bin/java): install a JRE 17 "
                              "or later (scripts/setup.sh installs openjdk-17-jre-headless)")
        return java

    def _read_state(self) -> RegistryState | None:
        doc = StateFile(self.state_path).read()
        try:
            return RegistryState(**doc) if doc is not None else None
        except (TypeError, ValueError):  # a state file of another version of kprio
            return None

    def _write_state(self, state: RegistryState) -> None:
        StateFile(self.state_path).write(asdict(state))

    def _process(self, state: RegistryState | None) -> psutil.Process | None:
        if state is None or state.pid is None:
            return None
        return live_process(state.pid, command_has=f"-Dkprio.registry.dir={self.data_dir}",
                            created_at=state.created_at)

    def _locked(self) -> contextlib.AbstractContextManager[None]:
        """One start or stop at a time per data dir, across processes."""
        return data_dir_lock(self.data_dir, LOCK_FILE, self.start_timeout_s + self.stop_timeout_s, RegistryProcessError,
                             "embedded schema registry")

    def status(self) -> RegistryStatus:
        state = self._read_state()
        running = self._process(state) is not None
        return RegistryStatus(self.data_dir, running, port=state.port if state else None,
                              pid=state.pid if state else None, host=self.host, log=self.log_path,
                              version=state.version if state else None, scheme=state.scheme if state else "http")

    # -- start and stop ---------------------------------------------------------------------------

    def start(self) -> EmbeddedRegistry:
        """Start the registry detached and wait until it is ready; a running one is reused."""
        from orchestration.services.registry_build import REGISTRY_VERSION, RegistryBuildFailed, build

        with self._locked():
            state = self._read_state()
            if self._process(state) is not None:
                return self._reused(state)
            self.state_path.unlink(missing_ok=True)  # stale: its process is gone
            try:
                jar = build()
            except RegistryBuildFailed as err:
                raise self._error(str(err)) from None
            port = self.port or free_port(self.host)
            if not port_free(self.host, port, wait_s=2.0):
                raise self._error(f"port {port} of {self.host} is already in use")
            self.port = port
            env = {k: v for k, v in os.environ.items() if k not in ("HTTP_PORT", "REGISTRY_DATASOURCE_URL")}
            env.update({PASSWORD_VARIABLE.format(i): password for i, password in enumerate(self._users.values())})
            process, log_from = spawn_detached(self._command(port, jar), self.log_path, cwd=self.data_dir, env=env)
            self._write_state(RegistryState(port, process.pid, process.create_time(), REGISTRY_VERSION,
                                            self._scheme, tuple(sorted(self._users))))

            def ready() -> bool:
                return process.poll() is not None or answers(self._base(), timeout_s=1.0, auth=self._probe_auth())

            up = wait_for(ready, self.start_timeout_s, interval_s=0.2)
            short = self._short_of_held() if up and process.poll() is None else None
            if up and process.poll() is None and short is None:
                return self
            raise self._failed_start(process, log_from, short)

    def _reused(self, state: RegistryState) -> EmbeddedRegistry:
        """The registry already running here, once it answers; refused when it runs on another port or security."""
        if self.port is not None and state.port != self.port:
            raise RegistryProcessError(
                f"an embedded schema registry already runs in {self.data_dir} on port {state.port}, not "
                f"{self.port}: stop it first (kprio registry stop --data-dir {self.data_dir})")
        if (state.scheme, tuple(state.users)) != (self._scheme, tuple(sorted(self._users))):
            raise RegistryProcessError(
                f"an embedded schema registry already runs in {self.data_dir} with other security "
                f"({state.scheme}, users {list(state.users)}): stop it first (kprio registry stop --data-dir "
                f"{self.data_dir})")
        self.port = state.port
        if not wait_for(lambda: answers(self._base(), auth=self._probe_auth()), self.start_timeout_s, interval_s=0.2):
            raise self._error(f"it runs (pid {state.pid}) but does not answer at {self._base()}")
        return self

    def _command(self, port: int, jar: Path) -> list[str]:
        """The registry's java command line: its data in H2 under the data dir, on ``port``, with its security."""
        database = self.data_dir / DB_DIR / "registry"
        return [self._java(), *JVM_OPTIONS, *os.environ.get(ENV_JVM_OPTIONS, "").split(),
                f"-Dkprio.registry.dir={self.data_dir}",
                f"-Dquarkus.http.host={self.host}", f"-Dquarkus.http.port={port}",
                f"-Dquarkus.datasource.jdbc.url=jdbc:h2:file:{database};WRITE_DELAY=0",
                # A small pool: the defaults (20 to 100 connections) are for a shared server.
                "-Dquarkus.datasource.jdbc.initial-size=2", "-Dquarkus.datasource.jdbc.min-size=2",
                "-Dquarkus.datasource.jdbc.max-size=16",
                *self._security_options(port),
                "-jar", str(jar)]

    def _failed_start(self, process: psutil.Popen, log_from: int, short: str | None) -> RegistryProcessError:
        """Stop a registry that did not come up (its state forgotten); the error says why, from its log."""
        code = process.poll()
        with contextlib.suppress(TimeoutError):
            stop_process(process, self.stop_timeout_s)
        self.state_path.unlink(missing_ok=True)
        reason = log_tail(self.log_path, log_from, lines=3,
                          skip=lambda line: not any(m in line for m in ("ERROR", "Exception", "Error")))
        if reason in ("(empty log)", "(no log)"):
            reason = log_tail(self.log_path, log_from, lines=3)
        if short is not None:
            return self._error(short)
        if code is not None:
            return self._error(f"it exited with code {code} (log {self.log_path}): {reason}")
        return self._error(f"it did not answer at {self._base()} within {self.start_timeout_s:g} s "
                           f"(log {self.log_path}): {reason}")

    def _security_options(self, port: int) -> list[str]:
        """The JVM's options of ``tls`` and ``users`` (Quarkus 2.16's names); passwords only as ``${VARIABLE}``."""
        options = []
        if self.tls is not None:
            for path in (self.tls.certificate, self.tls.key):
                if not Path(path).is_file():
                    raise self._error(f"the TLS file {path} does not exist")
            options += [f"-Dquarkus.http.ssl-port={port}", "-Dquarkus.http.insecure-requests=disabled",
                        f"-Dquarkus.http.ssl.certificate.files={Path(self.tls.certificate).absolute()}",
                        f"-Dquarkus.http.ssl.certificate.key-files={Path(self.tls.key).absolute()}"]
        if self._users:
            # Apicurio's authorization asks for an authenticated user on every API call; its OIDC stays off.
            options += ["-Dregistry.auth.enabled=true", "-Dquarkus.oidc.tenant-enabled=false",
                        "-Dquarkus.security.users.embedded.plain-text=true"]
            options += [f"-Dquarkus.security.users.embedded.users.{name}=${{{PASSWORD_VARIABLE.format(i)}}}"
                        for i, name in enumerate(self._users)]
        return options

    def _subjects(self) -> list[str] | None:
        """The subjects the running registry serves (None: it does not answer)."""
        import httpx

        try:
            with httpx.Client(timeout=5.0, auth=self._probe_auth(), verify=self.tls is None) as client:
                response = client.get(f"{self._base()}{CCOMPAT_PATH}/subjects")
        except httpx.HTTPError:
            return None
        return response.json() if response.status_code == 200 else None

    def _short_of_held(self) -> str | None:
        """Why a just-started registry's store does not serve what it held when it stopped (None: it does). H2 is
        read per request, so the first subject list answered is the verdict; a registry not answering is waited for
        up to ``start_timeout_s``."""
        record = StateFile(self.data_dir / HELD_FILE)
        held = int((record.read() or {}).get("subjects", 0))
        found: list[int] = []

        def answered() -> bool:
            subjects = self._subjects()
            found[:] = [len(subjects or ())]
            return subjects is not None

        if not held or (wait_for(answered, self.start_timeout_s, interval_s=0.2) and found[0] >= held):
            record.remove()  # checked: a later crash and start have nothing to compare with
            return None
        return (f"its store serves {found[0]} of the {held} subjects it held when it stopped "
                f"({self.data_dir / DB_DIR}: lost or not loaded); to start it with what it has, remove "
                f"{self.data_dir / HELD_FILE}")

    def _probe_auth(self) -> tuple[str, str] | None:
        return next(iter(self._users.items()), None)

    def _base(self) -> str:
        return f"{self._scheme}://{self.host}:{self.port}"

    def _error(self, reason: str) -> RegistryProcessError:
        return RegistryProcessError(f"cannot start the embedded schema registry in {self.data_dir}: {reason}")

    def stop(self) -> bool:
        """Stop the registry (SIGTERM, SIGKILL after the deadline); True when it was running. Its data stays."""
        if self._read_state() is None:
            return False  # nothing recorded runs here: a stop writes nothing
        with self._locked():
            state = self._read_state()
            proc = self._process(state)
            if proc is not None:
                self.port = state.port
                subjects = self._subjects()
                if subjects is not None:  # what a restart must serve again (a registry that does not answer: as before)
                    StateFile(self.data_dir / HELD_FILE).write({"subjects": len(subjects)})
                try:
                    stop_process(proc, self.stop_timeout_s)
                except TimeoutError as err:
                    raise RegistryProcessError(
                        f"embedded schema registry in {self.data_dir} could not be stopped: {err}") from None
            self.state_path.unlink(missing_ok=True)
        return proc is not None

    def kill(self) -> int:
        """SIGKILL the registry, as a crash would; returns its pid. The state file stays: a start reuses its port."""
        state = self._read_state()
        proc = self._process(state)
        if proc is None:
            raise RegistryProcessError(f"the embedded schema registry in {self.data_dir} is not running")
        proc.kill()
        psutil.wait_procs([proc], timeout=self.stop_timeout_s)
        return proc.pid

    def __enter__(self) -> EmbeddedRegistry:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
