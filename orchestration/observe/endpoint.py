"""The HTTP endpoint a Prometheus server scrapes: kprio's registry on ``/metrics``, on loopback unless told.

prometheus-client's ``start_http_server`` serves it; this module makes its failures kprio's one-line errors and
stops it cleanly (socket closed, thread joined), so another endpoint can start on the same port at once.

>>> from prometheus_client import CollectorRegistry
>>> with serve_metrics(CollectorRegistry(), port=0) as endpoint:
...     endpoint.addr, endpoint.port > 0, endpoint.url.startswith("http://127.0.0.1:")
('127.0.0.1', True, True)
"""

from __future__ import annotations

import errno
import socket
import threading
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

from orchestration.observe.errors import MetricsListenFailed, MetricsPortInUse

LOOPBACK = "127.0.0.1"
"""Every listener kprio opens binds loopback unless told otherwise (docs: Secrets stay secret)."""
STOP_TIMEOUT_S = 5.0


@dataclass
class MetricsEndpoint:
    """A running endpoint; :meth:`stop` (or leaving its ``with``) ends it."""

    addr: str
    port: int
    _server: Any
    _thread: threading.Thread

    @property
    def url(self) -> str:
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        """Stop serving, close the socket and join the thread (idempotent)."""
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()
        self._thread.join(STOP_TIMEOUT_S)

    def __enter__(self) -> MetricsEndpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_metrics(registry: CollectorRegistry, port: int, addr: str = LOOPBACK,
                  where: str = "--metrics-port") -> MetricsEndpoint:
    """Serve ``registry`` on ``addr:port`` (0: any free port); :class:`MetricsPortInUse` when the port is taken, else
    :class:`MetricsListenFailed` (a foreign address, a port out of range or not permitted), naming ``where``."""
    if not 0 <= port <= 65535:
        raise MetricsListenFailed(f"the metrics port must be 0..65535, got {port}", where=where)
    try:
        server, thread = start_http_server(port, addr=addr, registry=registry)
    except socket.gaierror as err:
        raise MetricsListenFailed(f"the metrics address {addr!r} is not a host name or address this host knows "
                                  f"({err.strerror})", where=where) from None
    except OSError as err:
        if err.errno == errno.EADDRINUSE:
            raise MetricsPortInUse(addr, port, where) from None
        raise MetricsListenFailed(f"the metrics endpoint cannot listen on {addr}:{port}: "
                                  f"{err.strerror or err}", where=where) from None
    return MetricsEndpoint(addr, server.server_address[1], server, thread)
