"""The schema registry's wire format: byte 0 is the magic byte 0, bytes 1-4 the schema id (big-endian),
then the payload (Confluent's serializers, Apicurio's in its Confluent-compatible mode, Karapace).

A value not in that format is a bad record with a reason, never an exception.

>>> header(b"\\x00\\x00\\x00\\x01\\x2a" + b"payload")
(298, 5)
>>> header(b"\\x01\\x00\\x00\\x00\\x01x")
'wrong magic byte 1 (the wire format starts with 0)'
>>> header(b"\\x00\\x00")
'value of 2 bytes is shorter than the 5-byte wire format header'
"""

from __future__ import annotations

MAGIC = 0
HEADER_BYTES = 5


def header(value: bytes) -> tuple[int, int] | str:
    """``(schema id, where the payload starts)``, or why ``value`` is not in the wire format."""
    if len(value) < HEADER_BYTES:
        return f"value of {len(value)} bytes is shorter than the {HEADER_BYTES}-byte wire format header"
    if value[0] != MAGIC:
        return f"wrong magic byte {value[0]} (the wire format starts with {MAGIC})"
    return int.from_bytes(value[1:HEADER_BYTES], "big"), HEADER_BYTES


def framed(schema_id: int, payload: bytes) -> bytes:
    """``payload`` with the wire format header of ``schema_id`` (what a serializer writes).

    >>> header(framed(7, b"x"))
    (7, 5)
    """
    return bytes([MAGIC]) + schema_id.to_bytes(4, "big") + payload
