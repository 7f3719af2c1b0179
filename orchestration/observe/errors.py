"""The failures of kprio's monitoring a user can cause: a metrics port taken, a lineage transport misconfigured.

Each is a :class:`~kprio_core.errors.KprioError` with a stable ``code`` and one line saying what and where,
never a secret (a lineage URL is shown without its user info and secret query parameters).

>>> e = MetricsPortInUse("127.0.0.1", 9466)
>>> e.code, str(e)
('metrics_port_in_use', 'the metrics port 9466 on 127.0.0.1 is in use by another process (--metrics-port)')
"""

from __future__ import annotations

from kprio_core.errors import KprioError


class MetricsPortInUse(KprioError):
    """The port asked for the metrics endpoint is taken (another kprio, another exporter)."""

    code = "metrics_port_in_use"

    def __init__(self, addr: str, port: int, where: str = "--metrics-port") -> None:
        self.addr, self.port = addr, port
        super().__init__(f"the metrics port {port} on {addr} is in use by another process", where=where)


class MetricsListenFailed(KprioError):
    """The metrics endpoint cannot listen where asked: a foreign address, a port out of range or not permitted."""

    code = "metrics_listen_failed"


class LineageConfigInvalid(KprioError):
    """The lineage transport's settings are not ones openlineage-python can use (or hold a secret)."""

    code = "lineage_config_invalid"


class LineageEmitFailed(KprioError):
    """A lineage event was not delivered; it never fails a batch, which is committed before its event is sent."""

    code = "lineage_emit_failed"
    transient = True
