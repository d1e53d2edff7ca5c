"""The Prometheus endpoint the daemons share: one HTTP thread serving one registry.

Each daemon owns its :class:`~prometheus_client.CollectorRegistry` (not the process-wide
default), so tests can run several in one process; ``/metrics`` serves it in the text format.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

from .core.errors import SlurmDLError


class MetricsError(SlurmDLError, OSError):
    """The metrics port cannot be opened (in use, no permission)."""


@dataclass
class MetricsServer:
    address: str
    port: int
    _server: Any
    _thread: Any

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def serve_metrics(registry: CollectorRegistry, port: int, address: str = "0.0.0.0") -> MetricsServer:
    """Start serving ``registry`` on ``address:port`` in a daemon thread."""
    try:
        server, thread = start_http_server(port, addr=address, registry=registry)
    except OSError as e:
        raise MetricsError(f"metrics endpoint {address}:{port}: cannot listen: {e.strerror or e}") from None
    return MetricsServer(address, server.server_address[1], server, thread)
