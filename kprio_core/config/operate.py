"""How kprio is watched: the ``sensor``, ``slo``, ``verdict`` and ``lineage`` sections."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator

from kprio_core.config.base import Section
from kprio_core.model.priority import Priority


class SensorSettings(Section):
    """How often the sensor looks at the lag."""

    interval_s: int = Field(2, ge=1, description="Minimum seconds between sensor ticks.")
    watch_s: float | None = Field(
        0.1, gt=0, description="kprio drain: between ticks, how often to read the priority partitions' ends (one "
        "ListOffsets request) and tick at once when records arrived on a priority with a free slot; null: tick "
        "every interval_s only."
    )


class SloSettings(Section):
    """Freshness objectives: how old a priority's oldest pending record may get (``kprio_core.freshness``)."""

    max_age_s: dict[Priority, float] = Field(
        default_factory=dict, description="Per priority, the largest age in seconds of its oldest pending record "
        "(e.g. {2: 10, 0: 3600}); a priority absent has no objective."
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


LINEAGE_SECRET_KEYS = ("auth", "api_key", "apikey", "token", "password", "secret")
"""Keys of ``lineage.transport`` that hold a secret: openlineage-python reads those from its environment."""


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

    @field_validator("transport")
    @classmethod
    def _no_secrets(cls, value: dict[str, Any]) -> dict[str, Any]:
        def keys(node: Any, path: str) -> list[str]:
            if not isinstance(node, dict):
                return []
            found = []
            for k, v in node.items():
                here = f"{path}.{k}" if path else str(k)
                if str(k).lower().replace("-", "_") in LINEAGE_SECRET_KEYS:
                    found.append(here)
                found += keys(v, here)
            return found

        def passwords(node: Any, path: str) -> list[str]:
            if isinstance(node, dict):
                return [p for k, v in node.items() for p in passwords(v, f"{path}.{k}" if path else str(k))]
            return [path] if isinstance(node, str) and re.match(r"^[a-z][a-z0-9+.-]*://[^/@\s]*:[^/@\s]*@", node,
                                                                re.IGNORECASE) else []

        with_password = passwords(value, "")
        if with_password:
            raise ValueError(f"transport.{with_password[0]} holds a password in its URL: give it in the environment "
                             "(OPENLINEAGE__TRANSPORT__AUTH__API_KEY) instead")
        secret = keys(value, "")
        if secret:
            raise ValueError(f"transport.{secret[0]} holds a secret: set it in the environment as "
                             f"OPENLINEAGE__TRANSPORT__{secret[0].upper().replace('.', '__')} instead")
        return value
