"""What every section of the configuration shares: frozen, no unknown key, no infinite number, no boolean where a
number goes, no duration beyond a year or under a millisecond (0 where a setting takes it), no integer beyond 64
bits; a path's check and a URL's; an error about one key inside a mapping."""

from __future__ import annotations

import math
import re
import types
import typing
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from pydantic import BaseModel, ConfigDict, model_validator

from kprio_core.urls import secret_parameter

MAX_DURATION_S = 366 * 24 * 3600
"""The longest ``*_s`` setting: longer is a slip (ms written as s); the libraries' timers overflow far below 1e30."""

MIN_DURATION_S = 0.001
"""The shortest ``*_s`` setting but 0: no timer of kprio or its libraries resolves less, and a lease or an interval
of a microsecond is a slip (a lease renewed a million times a second, a tick that never waits)."""

MAX_INTEGER = 2**63 - 1
"""The largest integer any setting takes: Kafka's offsets and Spark's longs are 64-bit."""

_VARIABLE = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?")


class SettingError(ValueError):
    """A validator's error about one ``key`` inside the mapping it checks: the error names ``<mapping>.<key>``."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


def _numeric(annotation: Any) -> tuple[type | None, bool]:
    """The number type of a field's annotation (None: none), and whether it is a mapping of numbers."""
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        kinds = {_numeric(a)[0] for a in args if a is not type(None)}
        return (None if None in kinds else int if kinds == {int} else float), False  # str | int is no number
    if origin is typing.Annotated:
        return _numeric(args[0])
    if origin is dict and len(args) == 2:
        return _numeric(args[1])[0], True
    return (annotation if annotation in (int, float) else None), False


def _duration(name: str) -> bool:
    return name.endswith("_s") and not name.endswith("_per_s")  # records_per_s is a rate


class Section(BaseModel):
    # No infinite or NaN number: a timeout or a rate of `.inf` is a slip of the pen, never a setting.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _numbers_are_numbers(cls, data: Any) -> Any:
        """A boolean (YAML's ``yes``, ``on``) is no number, though pydantic reads it as 1; numbers as
        :func:`number_problem` says."""
        if isinstance(data, dict):
            for name, value, kind in cls._numbers(data):
                if isinstance(value, bool):
                    raise SettingError(f"is a boolean ({str(value).lower()}), not a number", key=name)
                problem = number_problem(value, duration=_duration(name), integer=kind is int)
                if problem is not None:
                    raise SettingError(problem, key=name)
        return data

    @model_validator(mode="after")
    def _numbers_read_fit(self) -> Any:
        """The same of the numbers pydantic read from text (a quoted ``"1e30"``, an environment variable)."""
        for name, value, _ in self._numbers({name: getattr(self, name) for name in type(self).model_fields}):
            problem = number_problem(value, duration=_duration(name))
            if problem is not None:
                raise SettingError(problem, key=name)
        return self

    @classmethod
    def _numbers(cls, data: dict) -> list[tuple[str, Any, type]]:
        """(field, value, int or float) of every value of a numeric field in ``data``, mappings' values included."""
        out = []
        for name, value in data.items():
            field = cls.model_fields.get(name)
            kind, mapping = _numeric(field.annotation) if field is not None else (None, False)
            if kind is not None:
                values = (list(value.values()) if isinstance(value, dict) else []) if mapping else [value]
                out += [(name, v, kind) for v in values]
        return out


def number_problem(value: object, *, duration: bool = False, integer: bool = False) -> str | None:
    """What no setting takes in a number (any value or key), or None: beyond 64 bits (for an ``integer`` setting a
    float such as ``1e30`` too, which pydantic would call "an input string"), not finite, a duration over
    :data:`MAX_DURATION_S` or, but for 0, under :data:`MIN_DURATION_S`.

    >>> number_problem(10**40), number_problem(10**400), number_problem(float("inf")), number_problem(7)
    ('1e+40 does not fit a 64-bit integer', 'a number of over 300 digits does not fit a 64-bit integer', \
'Input should be a finite number', None)
    >>> number_problem(1e30, integer=True), number_problem(1e30), number_problem(2.5e9, integer=True)
    ('1e+30 does not fit a 64-bit integer', None, None)
    >>> number_problem(1e300, duration=True)
    '1e+300 s is longer than a year (31622400 s): a slip of the pen?'
    >>> number_problem(1e-7, duration=True), number_problem(0, duration=True), number_problem(0.001, duration=True)
    ('1e-07 s is shorter than a millisecond: a slip of the pen?', None, None)
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int) and abs(value) > MAX_INTEGER:
        shown = f"{value:.3g}" if abs(value) < 1e300 else "a number of over 300 digits"
        return f"{shown} does not fit a 64-bit integer"
    if not math.isfinite(value):
        return "Input should be a finite number"  # pydantic's words, as every typed setting says it
    if duration and value > MAX_DURATION_S:
        return f"{value:g} s is longer than a year ({MAX_DURATION_S} s): a slip of the pen?"
    if duration and 0 < abs(value) < MIN_DURATION_S:
        return f"{value:g} s is shorter than a millisecond: a slip of the pen?"
    if integer and isinstance(value, float) and abs(value) > MAX_INTEGER:
        return f"{value:.3g} does not fit a 64-bit integer"
    return None


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


LOCAL_SCHEMES = ("file", "sqlite")
"""URL schemes that name a file of this host (``sqlite+pysqlite`` too): its path is held to :func:`a_path`."""


def a_url(value: str, *, secrets: str) -> str:
    """``value`` if kprio can use it as a setting's URL, else ValueError: port 1 to 65535, no password or
    credential in its query (``secrets`` says where one goes instead), a local file's path held to :func:`a_path`.

    >>> a_url("http://127.0.0.1:8081/apis/ccompat/v7", secrets=""), a_url("sqlite:////var/kprio/c.db", secrets="")
    ('http://127.0.0.1:8081/apis/ccompat/v7', 'sqlite:////var/kprio/c.db')
    >>> for url in ("http://h:port/x", "http://h/lineage?api_key=k3y", "sqlite:///~/catalog.db"):
    ...     try:
    ...         a_url(url, secrets="set it in the environment")
    ...     except ValueError as err:
    ...         print(err)
    has a port that is not a number from 1 to 65535
    holds a credential in its query (api_key=): set it in the environment
    starts with '~', which kprio does not expand: write the path in full
    """
    parts = urlsplit(value)
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise ValueError("has a port that is not a number from 1 to 65535")
    if parts.password is not None:
        raise ValueError(f"holds a password: {secrets}")
    named = [key for key, _ in parse_qsl(parts.query, keep_blank_values=True) if secret_parameter(key)]
    if named:
        raise ValueError(f"holds a credential in its query ({named[0]}=): {secrets}")
    if parts.scheme.split("+")[0] in LOCAL_SCHEMES:
        local = parts.netloc + parts.path
        local = local[1:] if parts.scheme.startswith("sqlite") else local  # sqlite:///relative.db
        if local and local != ":memory:":
            a_path(local)
    return value
