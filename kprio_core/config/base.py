"""What every section of the configuration shares: frozen, no unknown key, no infinite number, no boolean where a
number goes, no duration beyond a year; a path's check; an error about one key inside a mapping."""

from __future__ import annotations

import math
import re
import types
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

MAX_DURATION_S = 366 * 24 * 3600
"""The longest duration (a ``*_s`` setting) kprio takes: one longer is a slip of the pen (milliseconds written as
seconds), and the clocks and timers of the libraries below overflow on numbers far smaller than ``1e30``."""

MAX_INTEGER = 2**63 - 1
"""The largest integer any setting takes: Kafka's offsets and Spark's longs are 64-bit."""

_VARIABLE = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?")


class SettingError(ValueError):
    """A validator's error about one ``key`` inside the mapping it checks (``kafka.client``'s ``sasl.mechanism``):
    the error names ``<mapping>.<key>``, and the environment variable when the key came from one."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


def _numeric(annotation: Any) -> tuple[bool, bool]:
    """Whether a field's annotation is a number (int or float, maybe optional), and whether it is a mapping of
    numbers (``slo.max_age_s``)."""
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return all(_numeric(a)[0] for a in args if a is not type(None)), False  # str | int | bool is no number
    if typing.get_origin(annotation) is typing.Annotated:
        return _numeric(args[0])
    if origin is dict and len(args) == 2:
        return False, _numeric(args[1])[0]
    return annotation in (int, float), False


def _duration(name: str) -> bool:
    return name.endswith("_s") and not name.endswith("_per_s")  # records_per_s is a rate


class Section(BaseModel):
    # No infinite or NaN number: a timeout or a rate of `.inf` is a slip of the pen, never a setting.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _numbers_are_numbers(cls, data: Any) -> Any:
        """A boolean (YAML's ``yes``, ``on``, ``true``) is no number, though pydantic reads it as 1; a duration
        (``*_s``) is at most :data:`MAX_DURATION_S`; an integer fits 64 bits."""
        if not isinstance(data, dict):
            return data
        for name, value in data.items():
            field = cls.model_fields.get(name)
            if field is None:
                continue
            number, mapping = _numeric(field.annotation)
            values = list(value.values()) if mapping and isinstance(value, dict) else [value] if number else []
            for v in values:
                if isinstance(v, bool):
                    raise SettingError(f"is a boolean ({str(v).lower()}), not a number", key=name)
                if isinstance(v, int | float) and _duration(name) and math.isfinite(v) and v > MAX_DURATION_S:
                    raise SettingError(f"{v:g} s is longer than a year ({MAX_DURATION_S} s): a slip of the pen?",
                                       key=name)
                if isinstance(v, int) and abs(v) > MAX_INTEGER:
                    raise SettingError(f"{v:.3g} does not fit a 64-bit integer", key=name)
        return data


def a_path(value: str) -> str:
    """``value`` if it can name a file or directory (not empty, no NUL byte, no ``~`` or ``$VARIABLE`` that kprio
    would take literally), else ValueError.

    >>> a_path("./kprio-data/output"), a_path("s3://bucket/out")
    ('./kprio-data/output', 's3://bucket/out')
    >>> a_path("~/kprio")
    Traceback (most recent call last):
    ...
    ValueError: starts with '~', which kprio does not expand: write the path in full
    """
    if not value.strip():
        raise ValueError("is empty: name a directory")
    if "\x00" in value:
        raise ValueError("holds a NUL byte, which no path can")
    if value.startswith("~"):
        raise ValueError("starts with '~', which kprio does not expand: write the path in full")
    found = _VARIABLE.search(value)
    if found:
        raise ValueError(f"holds {found.group()}, which kprio does not expand: write the path in full")
    return value
