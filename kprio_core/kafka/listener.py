"""What a broker's listener speaks (TLS or not, SASL or not), asked of the listener itself.

A listener of another security protocol only closes the connection, and librdkafka retries until it times out
("no Kafka broker answered"). So kprio asks a silent broker's listener (:func:`probe_listener`) and fails at once
on a mismatch, naming ``security.protocol`` (:class:`~kprio_core.errors.SecurityProtocolMismatch`). Two questions,
each on a new TCP connection, without credentials and without verifying anything:

- **TLS?** A TLS handshake: a TLS listener answers a ClientHello with its ServerHello (a listener that
  requires a client certificate may end the handshake with an alert: still TLS); a plaintext Kafka listener
  reads the ClientHello's first bytes as a request size beyond its limit and closes the connection.
- **SASL?** A ``SaslHandshake`` request (API key 17, version 1), in TLS when the listener speaks it: a SASL
  listener answers with the mechanisms it enables; any other answers ``ILLEGAL_SASL_STATE`` (error 34).

>>> Listener(tls=True, sasl=True, mechanisms=("SCRAM-SHA-512", "PLAIN")).describe()
'SASL_SSL (TLS, then SASL: SCRAM-SHA-512, PLAIN)'
>>> Listener(tls=True, sasl=None).describe()
'TLS (SSL or SASL_SSL)'
>>> Listener(tls=False, sasl=False).takes("SASL_PLAINTEXT"), Listener(tls=True, sasl=None).takes("SASL_SSL")
(False, True)
>>> request = sasl_handshake_request(7)
>>> len(request), request[4:8]
(41, b'\\x00\\x11\\x00\\x01')
>>> read_sasl_handshake(b"\\x00\\x00\\x00\\x07\\x00\\x00\\x00\\x00\\x00\\x02\\x00\\x05PLAIN\\x00\\x0dSCRAM-SHA-512", 7)
(True, ('PLAIN', 'SCRAM-SHA-512'))
>>> read_sasl_handshake(b"\\x00\\x00\\x00\\x07\\x00\\x22\\x00\\x00\\x00\\x00", 7)
(False, ())
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass

PROBE_TIMEOUT_S = 3.0
"""Longest each of the probe's two connections may take."""

SASL_HANDSHAKE = 17
ILLEGAL_SASL_STATE = 34
CLIENT_ID = b"kprio-listener-probe"


@dataclass(frozen=True)
class Listener:
    """What a listener speaks: TLS or not, SASL or not (None: it could not be told, as behind mutual TLS)."""

    tls: bool
    sasl: bool | None
    mechanisms: tuple[str, ...] = ()

    @property
    def protocol(self) -> str | None:
        """Kafka's name of the listener's security protocol, None when SASL could not be told."""
        if self.sasl is None:
            return None
        return {(False, False): "PLAINTEXT", (False, True): "SASL_PLAINTEXT", (True, False): "SSL",
                (True, True): "SASL_SSL"}[(self.tls, self.sasl)]

    def takes(self, protocol: str) -> bool:
        """Whether a client of ``security.protocol`` ``protocol`` speaks what this listener speaks."""
        protocol = protocol.upper()
        tls, sasl = protocol in ("SSL", "SASL_SSL"), protocol.startswith("SASL_")
        return tls == self.tls and (self.sasl is None or sasl == self.sasl)

    def describe(self) -> str:
        if self.protocol is None:
            return "TLS (SSL or SASL_SSL)" if self.tls else "no TLS (PLAINTEXT or SASL_PLAINTEXT)"
        parts = (["TLS"] if self.tls else []) + ([f"SASL: {', '.join(self.mechanisms)}"] if self.sasl else [])
        return f"{self.protocol} ({', then '.join(parts)})" if parts else f"{self.protocol} (no TLS, no SASL)"


def sasl_handshake_request(correlation_id: int, mechanism: bytes = b"PLAIN") -> bytes:
    """A SaslHandshake v1 request, framed (size, header v1, the mechanism asked for)."""
    body = (struct.pack(">hhih", SASL_HANDSHAKE, 1, correlation_id, len(CLIENT_ID)) + CLIENT_ID
            + struct.pack(">h", len(mechanism)) + mechanism)
    return struct.pack(">i", len(body)) + body


def read_sasl_handshake(data: bytes, correlation_id: int) -> tuple[bool, tuple[str, ...]]:
    """(a SASL listener?, its mechanisms) from a SaslHandshake response, size read off; ValueError if not one."""
    if len(data) < 10:
        raise ValueError("short answer")
    answered, error, count = struct.unpack(">ihi", data[:10])
    if answered != correlation_id:
        raise ValueError("not an answer to the probe")
    if error == ILLEGAL_SASL_STATE:
        return False, ()
    mechanisms, at = [], 10
    for _ in range(max(0, count)):
        (size,) = struct.unpack(">h", data[at:at + 2])
        mechanisms.append(data[at + 2:at + 2 + size].decode("ascii", "replace"))
        at += 2 + size
    return True, tuple(mechanisms)


def _exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left > 0:
        chunk = sock.recv(min(left, 65536))
        if not chunk:
            raise ConnectionError("closed by the listener")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _ask_sasl(sock: socket.socket) -> tuple[bool, tuple[str, ...]] | None:
    try:
        sock.sendall(sasl_handshake_request(1))
        (size,) = struct.unpack(">i", _exactly(sock, 4))
        if not 0 < size < 1 << 20:
            return None
        return read_sasl_handshake(_exactly(sock, size), 1)
    except (OSError, ValueError, struct.error):
        return None


def _tls_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # only "does it speak TLS": nothing is trusted, nothing is sent
    return context


def probe_listener(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> Listener | None:
    """What the listener at ``host:port`` speaks, None when no Kafka answer; both connections within ``timeout_s``."""
    ends = time.monotonic() + timeout_s
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as raw:
            try:
                with _tls_context().wrap_socket(raw, server_hostname=host) as tls:
                    asked = _ask_sasl(tls)
                    return Listener(True, asked[0] if asked else None, asked[1] if asked else ())
            except ssl.SSLError as err:
                if "ALERT" in (err.reason or "").upper():
                    return Listener(True, None)  # it spoke TLS, and refused us (a client certificate required)
            except OSError:
                pass  # closed on the ClientHello: no TLS there
    except OSError:
        return None
    left = ends - time.monotonic()
    if left <= 0.05:
        return None
    try:
        with socket.create_connection((host, port), timeout=left) as raw:
            asked = _ask_sasl(raw)
    except OSError:
        return None
    return None if asked is None else Listener(False, asked[0], asked[1])


def split_servers(bootstrap: str) -> list[tuple[str, int]]:
    """``host:port`` pairs of a bootstrap list (``[::1]:9092`` too); the entries without a port are left out.

    >>> split_servers("b1:9093, sasl_ssl://[::1]:9094,nohost")
    [('b1', 9093), ('::1', 9094)]
    """
    servers = []
    for entry in bootstrap.split(","):
        entry = entry.strip().rpartition("://")[2]
        host, _, port = entry.rpartition(":")
        if host and port.isdigit():
            servers.append((host.strip("[]"), int(port)))
    return servers


def first_listener(servers: Sequence[tuple[str, int]], timeout_s: float = PROBE_TIMEOUT_S
                   ) -> tuple[str, Listener] | None:
    """The first of ``servers`` whose listener answers, as ``("host:port", listener)``, all within ``timeout_s``."""
    ends = time.monotonic() + timeout_s
    for host, port in servers:
        found = probe_listener(host, port, max(0.2, ends - time.monotonic()))
        if found is not None:
            return f"{host}:{port}", found
        if time.monotonic() >= ends:
            break
    return None
