"""What kprio knows of a schema registry: where it is and how to reach it, and one schema it holds.

Values only; the client that asks the registry is :mod:`kprio_core.values.registry` (an adapter).

>>> e = RegistryEndpoint("http://127.0.0.1:8081/apis/ccompat/v7", username="kprio", password="s3cret")
>>> e
RegistryEndpoint(http://127.0.0.1:8081/apis/ccompat/v7, user kprio)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RegistryEndpoint:
    """Where the registry is and how to talk to it (picklable; the password is a secret, never shown)."""

    url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_location: str | None = None
    """A PEM file of the CA certificates that sign the registry's certificate (default: the system's)."""
    certificate_location: str | None = None
    key_location: str | None = None
    key_password: str | None = field(default=None, repr=False)
    timeout_s: float = 10.0

    def __repr__(self) -> str:
        user = f", user {self.username}" if self.username else ""
        return f"RegistryEndpoint({self.url}{user})"


@dataclass(frozen=True)
class RegisteredSchema:
    """One schema of the registry: its id, its text and type (``AVRO`` when the registry says none), and the
    schemas it references (``(name, text)``, in the order a parser must see them)."""

    schema_id: int
    text: str
    schema_type: str = "AVRO"
    references: tuple[tuple[str, str], ...] = ()
    subject: str | None = None
    version: int | None = None

    @property
    def parsed(self) -> Any:
        return json.loads(self.text)
