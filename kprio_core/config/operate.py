"""How kprio is watched: the ``sensor``, ``slo``, ``verdict`` and ``lineage`` sections."""

from __future__ import annotations

import copy
import importlib
import os
import re
from typing import Any, Literal

from pydantic import Field, field_validator

from kprio_core.config.base import Section, a_path, a_url
from kprio_core.extras import LINEAGE, missing
from kprio_core.model.priority import Priority


class SensorSettings(Section):
    """How often the sensor looks at the lag."""

    interval_s: int = Field(2, ge=1, description="Minimum seconds between sensor ticks (the Dagster daemon evaluates a "
                            "sensor every 5 s at most: a worker ticks after each run it executes meanwhile).")
    default_status: Literal["running", "stopped"] = Field(
        "running", description="Whether priority_lag_sensor runs when the code location first loads (the UI's "
        "toggle decides from then on)."
    )
    watch_s: float | None = Field(
        0.1, gt=0, description="kprio drain: between ticks, how often to read the priority partitions' ends (one "
        "ListOffsets request) and tick at once when records arrived on a priority with a free slot; null: tick "
        "every interval_s only."
    )


class SloSettings(Section):
    """Freshness objectives: how old a priority's oldest pending record may get (``kprio_core.freshness``)."""

    max_age_s: dict[Priority, float] = Field(
        default_factory=dict, description="Per priority, the largest age in seconds of its oldest pending record "
        "(e.g. {2: 10, 0: 3600}); a priority absent has no objective. A lag-aware plan gives the budget first to "
        "the records closest to breaking their objective (deadline = timestamp + max_age_s)."
    )
    warn_fraction: float = Field(
        0.8, gt=0, le=1, description="Warn once the age passes this share of max_age_s (fail above max_age_s)."
    )

    @field_validator("max_age_s")
    @classmethod
    def _positive_ages(cls, value: dict[Priority, float]) -> dict[Priority, float]:
        bad = sorted(p for p, age in value.items() if not age > 0)
        if bad:
            raise ValueError(f"max_age_s must be > 0 seconds, not for priority {', '.join(map(str, bad))}")
        return value


class VerdictSettings(Section):
    """The lag verdict (``kprio_core.verdict``, Burrow's rules): what keeping up means for a priority."""

    expected_commit_s: float = Field(
        30.0, gt=0, description="How often a priority with records waiting commits when it keeps up (a tick plus a "
        "batch)."
    )
    stop_factor: float = Field(
        3.0, ge=1, description="Records that arrived at a caught-up partition less than this many expected_commit_s "
        "ago are not late (Burrow's recent lag zero); it is also the span of a window without commits of a draining "
        "partition."
    )
    allowed_lag: int = Field(0, ge=0, description="A backlog of up to this many records counts as caught up.")
    intervals: int = Field(
        10, ge=2, le=64, description="The newest commits of each partition the verdict judges (Burrow's intervals): "
        "a partition whose commits stop for longer than they took is STOP."
    )
    window_s: float = Field(
        900.0, gt=0, description="How far back kprio lag --watch and the metrics keep the lag snapshots they took."
    )


LINEAGE_SECRET_WORDS = ("password", "passwd", "secret", "token", "apikey", "credential", "credentials",
                        "authorization", "cookie")
"""A ``lineage.transport`` key holds a secret when a word of it (split at ``.``, ``_``, ``-``) is one of these, it
is ``auth``, or names an API key (openlineage-python reads those from its environment); ``..._url`` holds none."""
LINEAGE_TRANSPORTS = ("amazon_datazone_api", "async_http", "composite", "console", "datadog", "file", "gcplineage",
                      "http", "kafka", "msk-iam", "noop", "transform")
"""openlineage-python's transports (checked by a test); any other ``type`` is a dotted path to a class of one's own."""
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")


def lineage_secret_key(name: str) -> bool:
    """Whether a key of ``lineage.transport`` holds a secret (:data:`LINEAGE_SECRET_WORDS`).

    >>> [lineage_secret_key(k) for k in ("auth", "Authorization", "X-API-Key", "sasl.password", "api_key", "url",
    ...                                  "sasl.oauthbearer.token.endpoint.url", "oauth")]
    [True, True, True, True, True, False, False, False]
    """
    words = re.split(r"[._-]", name.lower())
    if words[-1] in ("url", "uri", "endpoint", "location", "file", "path"):
        return False
    return (name.lower() == "auth" or any(w in LINEAGE_SECRET_WORDS for w in words)
            or any(a == "api" and b == "key" for a, b in zip(words, words[1:], strict=False)))


def transport_problem(transport: Any, path: str = "transport") -> str | None:
    """What kprio refuses in a ``lineage.transport`` (or a composite's child), or None: an unknown ``type`` (else the
    first commit fails), a key holding a secret (:func:`lineage_secret_key`), a URL
    :func:`~kprio_core.config.base.a_url` refuses, a path (:data:`PATH_WORDS`) :func:`~kprio_core.config.base.a_path`
    refuses (openlineage-python expands neither ``~`` nor ``$HOME``).

    >>> transport_problem({"type": "htp", "url": "http://lineage:5000"})
    "transport.type: 'htp' is no transport of openlineage-python's (composite, console, file, http, kafka, ...) nor \
a dotted path to a class of one's own"
    >>> transport_problem({"type": "http", "url": "http://h:5000", "custom_headers": {"Authorization": "Bearer x"}})
    'transport.custom_headers.Authorization holds a secret: set it in the environment as \
OPENLINEAGE__TRANSPORT__CUSTOM_HEADERS__AUTHORIZATION instead'
    >>> transport_problem({"type": "file", "log_file_path": "~/lineage.jsonl"})
    "transport.log_file_path starts with '~', which kprio does not expand: write the path in full"
    """
    if not isinstance(transport, dict):
        return None
    kind = transport.get("type")
    known = isinstance(kind, str) and (kind in LINEAGE_TRANSPORTS or _DOTTED.fullmatch(kind) is not None)
    if kind is not None and not known:
        return (f"{path}.type: {kind!r} is no transport of openlineage-python's (composite, console, file, http, "
                "kafka, ...) nor a dotted path to a class of one's own")
    children = transport.get("transports") if kind == "composite" else None
    named = children.items() if isinstance(children, dict) else enumerate(children or ())
    for key, child in named:
        found = transport_problem(child, f"{path}.transports.{key}")
        if found is not None:
            return found
    return _value_problem(transport, path)


PATH_WORDS = ("path", "location", "file", "dir")
"""A transport key names a path when its last word is one of these (``log_file_path``, ``caCertPath``)."""


def _value_problem(node: Any, path: str) -> str | None:
    """The first secret (keys, and URLs in its values) or path kprio would take literally in ``node`` at ``path``."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        here = f"{path}.{key}"
        variable = "OPENLINEAGE__" + here.upper().replace(".", "__")
        if isinstance(key, str) and lineage_secret_key(key):
            return f"{here} holds a secret: set it in the environment as {variable} instead"
        try:
            if isinstance(value, str) and "://" in value:
                a_url(value, secrets=f"give the whole value in the environment as {variable} instead")
            elif isinstance(value, str) and isinstance(key, str) and _names_a_path(key):
                a_path(value)
        except ValueError as err:
            return f"{here} {err}"
        found = _value_problem(value, here) if isinstance(value, dict | list) else None
        if found is not None:
            return found
    return None


def transport_model_problem(transport: dict[str, Any]) -> str | None:
    """What openlineage-python's own model refuses in ``transport`` once its configuration completed it
    (``OPENLINEAGE__TRANSPORT__*``, ``openlineage.yml``), as the first commit would; or None. Checked at load.

    >>> transport_model_problem({"type": "http"})
    'openlineage-python refuses it: `url` key not passed to HttpConfig'
    >>> transport_model_problem({"type": "file", "log_file_path": "lineage.jsonl"}) is None
    True
    """
    from openlineage.client.client import OpenLineageClient
    from openlineage.client.transport.noop import NoopConfig, NoopTransport

    if os.environ.get("OPENLINEAGE_DISABLED", "").lower().strip() == "true":
        return None  # openlineage-python's switch: its client then sends nothing and builds no transport
    try:  # a transport given makes the client build none: only its configuration is merged
        client = OpenLineageClient(transport=NoopTransport(NoopConfig()),
                                   config={"transport": copy.deepcopy(transport)})
        _build_model(client.config.transport or {})
    except Exception as err:  # noqa: BLE001 - openlineage-python's own words for a configuration it refuses
        return f"openlineage-python refuses it: {str(err).splitlines()[0] if str(err) else type(err).__name__}"
    return None


def _build_model(transport: dict[str, Any]) -> None:
    """Build ``transport``'s configuration (and its children's) as openlineage-python does, without connecting."""
    from openlineage.client.transport import get_default_factory

    params = {k: v for k, v in copy.deepcopy(transport).items() if k not in ("name", "priority")}
    found = get_default_factory().transports.get(params.get("type"), params.get("type"))
    kind = _imported(found) if isinstance(found, str) else found
    model = _imported(kind.config_class) if isinstance(kind.config_class, str) else kind.config_class
    model.from_dict(params)
    children = transport.get("transports") if transport.get("type") == "composite" else None
    for child in (children.values() if isinstance(children, dict) else children or ()):
        _build_model(child)


def _imported(dotted: str) -> Any:
    """The class a dotted path names (openlineage-python's own import logs a warning beside its error)."""
    module, _, name = dotted.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise ImportError(f"cannot import {dotted} ({err})") from None


def _names_a_path(key: str) -> bool:
    """Whether a transport's key names a path (:data:`PATH_WORDS`, in snake, dotted or camel case)."""
    words = re.split(r"[._-]|(?<=[a-z])(?=[A-Z])", key)
    return words[-1].lower() in PATH_WORDS


class LineageSettings(Section):
    """OpenLineage events of committed batches, through openlineage-python's transports (off by default)."""

    enabled: bool = Field(False, description="Emit one OpenLineage run event per committed batch.")
    namespace: str = Field("kprio", min_length=1, description="The OpenLineage namespace of kprio's jobs.")
    transport: dict[str, Any] = Field(
        default_factory=dict, description="openlineage-python's transport settings (e.g. {type: file, "
        "log_file_path: lineage.jsonl} or {type: http, url: ...}); empty: openlineage-python's own configuration "
        "(OPENLINEAGE_CONFIG, openlineage.yml, OPENLINEAGE__TRANSPORT__* variables). No secrets here: an HTTP "
        "transport's api key comes from OPENLINEAGE__TRANSPORT__AUTH__API_KEY."
    )

    @field_validator("enabled")
    @classmethod
    def _lineage_installed(cls, value: bool) -> bool:
        why = missing(LINEAGE, "OpenLineage events") if value else None
        if why:
            raise ValueError(why)
        return value

    @field_validator("transport")
    @classmethod
    def _a_transport_without_secrets(cls, value: dict[str, Any]) -> dict[str, Any]:
        problem = transport_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value
