"""What every section of the configuration shares: frozen, no unknown key, no infinite number; a path's check."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    # No infinite or NaN number: a timeout or a rate of `.inf` is a slip of the pen, never a setting.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

def a_path(value: str) -> str:
    """``value`` if it can name a file or directory (not empty, no NUL byte), else ValueError.

    >>> a_path("./kprio-data/output"), a_path("s3://bucket/out")
    ('./kprio-data/output', 's3://bucket/out')
    """
    if not value.strip():
        raise ValueError("is empty: name a directory")
    if "\x00" in value:
        raise ValueError("holds a NUL byte, which no path can")
    return value
