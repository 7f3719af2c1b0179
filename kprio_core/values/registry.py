"""The schema registry adapter: schemas by id and a subject's latest version, over the Confluent-compatible API.

``GET /schemas/ids/{id}`` and ``/subjects/{subject}/versions/{latest|version}`` with httpx, as Confluent Schema
Registry, Karapace and Apicurio (``/apis/ccompat/v7``) serve them. An id's schema never changes: kept for the process's
life (:func:`shared_registry`); a latest version moves: asked each time. Failures become:

- unreachable, timeout, 5xx or 429: :class:`SchemaRegistryUnavailable` (transient; no record is blamed);
- 401 or 403: :class:`SchemaRegistryRefused` naming the settings to check (a wrong password stays wrong);
- a certificate failing TLS verification: :class:`SchemaRegistryRefused` with OpenSSL's reason;
- 404 for a schema id: ``None`` (the record naming that id is a dead letter, with that reason);
- 404 for a subject: :class:`SchemaRegistryRefused` naming it.

Errors show the endpoint's URL without credentials; the password travels only to httpx.

>>> SchemaRegistry(RegistryEndpoint("http://127.0.0.1:8081/apis/ccompat/v7", username="kprio", password="s3cret"))
SchemaRegistry(http://127.0.0.1:8081/apis/ccompat/v7, user kprio)
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kprio_core.errors import SchemaRegistryRefused, SchemaRegistryUnavailable
from kprio_core.model.registry import RegisteredSchema, RegistryEndpoint

if TYPE_CHECKING:
    import ssl

ACCEPT = "application/vnd.schemaregistry.v1+json, application/json"


class SchemaRegistry:
    """A client of one registry; schemas by id are cached for good (ids are immutable)."""

    def __init__(self, endpoint: RegistryEndpoint) -> None:
        import httpx

        self.endpoint = endpoint
        auth = (endpoint.username, endpoint.password or "") if endpoint.username else None
        self._client = httpx.Client(base_url=endpoint.url.rstrip("/") + "/", auth=auth, verify=tls_context(endpoint),
                                    timeout=endpoint.timeout_s, headers={"Accept": ACCEPT})
        self._by_id: dict[int, RegisteredSchema] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        user = f", user {self.endpoint.username}" if self.endpoint.username else ""
        return f"SchemaRegistry({self.endpoint.url}{user})"

    def close(self) -> None:
        self._client.close()

    def schema(self, schema_id: int) -> RegisteredSchema | None:
        """The schema with this id, or None when the registry has none (404)."""
        found = self._by_id.get(schema_id)
        if found is not None:
            return found
        doc = self._get(f"schemas/ids/{schema_id}", missing_ok=True)
        if doc is None:
            return None
        found = RegisteredSchema(schema_id, doc["schema"], doc.get("schemaType") or "AVRO",
                                 self._references(doc.get("references") or ()))
        with self._lock:
            self._by_id[schema_id] = found
        return found

    def latest(self, subject: str) -> RegisteredSchema:
        """The subject's latest version (asked each time: it moves)."""
        return self.version(subject, "latest")

    def version(self, subject: str, version: int | str) -> RegisteredSchema:
        from urllib.parse import quote

        doc = self._get(f"subjects/{quote(subject, safe='')}/versions/{version}", missing_ok=True)
        if doc is None:
            raise SchemaRegistryRefused(f"the schema registry has no subject {subject!r} (version {version})",
                                        where=self.endpoint.url)
        return RegisteredSchema(int(doc["id"]), doc["schema"], doc.get("schemaType") or "AVRO",
                                self._references(doc.get("references") or ()), subject, int(doc["version"]))

    def has_subject(self, subject: str) -> bool:
        """Whether the registry has ``subject`` (one request: its versions)."""
        from urllib.parse import quote

        return self._get(f"subjects/{quote(subject, safe='')}/versions", missing_ok=True) is not None

    def version_in(self, subject: str, schema_id: int) -> int | None:
        """The version of ``subject`` that holds schema ``schema_id`` (None when the registry does not say)."""
        try:
            found = self._get(f"schemas/ids/{schema_id}/versions", missing_ok=True) or []
        except (SchemaRegistryUnavailable, SchemaRegistryRefused):
            return None
        return next((int(v["version"]) for v in found if isinstance(v, dict) and v.get("subject") == subject), None)

    def _who(self) -> str:
        """What a 401 or 403 says of the credentials kprio sent (never the password)."""
        from kprio_core.config import ENV_REGISTRY_PASSWORD

        if not self.endpoint.username:
            return ": kprio sent no credentials, set schema_registry.username and " + ENV_REGISTRY_PASSWORD
        if not self.endpoint.password:
            return (f" to user {self.endpoint.username}, with no password: {ENV_REGISTRY_PASSWORD} is not set in the "
                    "environment")
        return (f" to user {self.endpoint.username}: check schema_registry.username, {ENV_REGISTRY_PASSWORD} and, "
                "for mTLS, schema_registry.ssl_certificate_location")

    def _references(self, references: Any) -> tuple[tuple[str, str], ...]:
        """Referenced schemas, theirs first (a reference's own references precede it)."""
        out: list[tuple[str, str]] = []
        for ref in references:
            target = self.version(ref["subject"], ref["version"])
            out.extend(r for r in target.references if r not in out)
            out.append((ref["name"], target.text))
        return tuple(out)

    def _get(self, path: str, *, missing_ok: bool) -> Any:
        import httpx

        where = self.endpoint.url
        try:
            response = self._client.get(path)
        except httpx.TimeoutException:
            raise SchemaRegistryUnavailable(f"the schema registry did not answer within {self.endpoint.timeout_s:g} s",
                                            where=where) from None
        except httpx.HTTPError as err:
            failed = tls_verification_failure(err)
            if failed:
                raise SchemaRegistryRefused(f"TLS verification of the schema registry's certificate failed ({failed}):"
                                            " check schema_registry.ssl_ca_location (the PEM file of the CA that signs "
                                            "it) and the host in schema_registry.url", where=where) from None
            raise SchemaRegistryUnavailable(f"the schema registry cannot be reached: {type(err).__name__}",
                                            where=where) from None
        status = response.status_code
        if status == 404 and missing_ok:
            return None
        if status in (401, 403):
            raise SchemaRegistryRefused(f"the schema registry refused kprio ({status}{self._who()})", where=where)
        if status >= 500 or status == 429:
            raise SchemaRegistryUnavailable(f"the schema registry answered {status} to GET /{path}", where=where)
        if status != 200:
            raise SchemaRegistryRefused(f"the schema registry answered {status} to GET /{path}", where=where)
        try:
            return response.json()
        except ValueError:
            raise SchemaRegistryUnavailable(f"the schema registry answered GET /{path} with no JSON",
                                            where=where) from None


def tls_context(endpoint: RegistryEndpoint) -> ssl.SSLContext:
    """``endpoint``'s CA file (else the system's) and mTLS certificate; unreadable: :class:`SchemaRegistryRefused`."""
    import ssl

    setting, path = "schema_registry.ssl_ca_location", endpoint.ca_location
    try:
        context = ssl.create_default_context(cafile=path)
        if endpoint.certificate_location:
            setting, path = "schema_registry.ssl_certificate_location", endpoint.certificate_location
            context.load_cert_chain(endpoint.certificate_location, endpoint.key_location, endpoint.key_password)
    except FileNotFoundError:
        raise SchemaRegistryRefused(f"{setting}: no file {path}", where=endpoint.url) from None
    except (OSError, ssl.SSLError) as err:
        reason = getattr(err, "reason", None) or getattr(err, "strerror", None) or type(err).__name__
        raise SchemaRegistryRefused(f"{setting}: cannot use {path} ({reason})", where=endpoint.url) from None
    return context


def tls_verification_failure(err: BaseException) -> str | None:
    """OpenSSL's reason when ``err`` (an httpx error) comes from a certificate that failed verification, else None.

    >>> import ssl
    >>> cause = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    >>> cause.verify_message = "unable to get local issuer certificate"
    >>> wrapped = ConnectionError("connect failed")
    >>> wrapped.__cause__ = cause
    >>> tls_verification_failure(wrapped), tls_verification_failure(ConnectionError("refused"))
    ('certificate verify failed: unable to get local issuer certificate', None)
    """
    import ssl

    seen: BaseException | None = err
    for _ in range(8):  # httpx -> httpcore -> ssl: a short chain
        if seen is None:
            return None
        if isinstance(seen, ssl.SSLCertVerificationError):
            return f"certificate verify failed: {seen.verify_message or seen.reason}"
        seen = seen.__cause__ or seen.__context__
    return None


class WriterSchemas:
    """Per schema id, what a decoder made of the registry's schema (parsed, compiled), or why it cannot use it (a
    ``str``: the dead-letter reason of every record naming that id). Made once per id: ids never change."""

    def __init__(self, registry: SchemaRegistry, schema_type: str, kind: str,
                 make: Callable[[RegisteredSchema], Any], fails: tuple[type[Exception], ...], failed: str,
                 describe: Callable[[Exception], str] = str) -> None:
        self.registry, self.schema_type, self.kind, self.make = registry, schema_type, kind, make
        self.fails, self.failed, self.describe = fails, failed, describe
        self._made: dict[int, Any] = {}

    def get(self, schema_id: int) -> Any:
        found = self._made.get(schema_id)
        if found is None:
            schema = self.registry.schema(schema_id)
            if schema is None:
                found = f"schema id {schema_id} is not in the schema registry (404)"
            elif schema.schema_type != self.schema_type:
                found = f"schema id {schema_id} is a {schema.schema_type} schema, not {self.kind}"
            else:
                try:
                    found = self.make(schema)
                except self.fails as err:  # any fault of a registered schema is that record's
                    found = f"schema id {schema_id} {self.failed}: {self.describe(err)}"
            self._made[schema_id] = found
        return found


@functools.lru_cache(maxsize=8)
def shared_registry(endpoint: RegistryEndpoint) -> SchemaRegistry:
    """The process's client of ``endpoint``: a worker fetches each schema id once for all the tasks it runs."""
    return SchemaRegistry(endpoint)
