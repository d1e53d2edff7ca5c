"""The Prometheus endpoint the daemons share: one bounded HTTP server serving one registry.

Each daemon owns its :class:`~prometheus_client.CollectorRegistry` (not the process-wide
default), so tests can run several in one process; ``/metrics`` serves it in the format the
scraper asks for (prometheus_client's encoders, gzip when accepted). The server is
:class:`~slurm_dl.bounded_http.BoundedHTTPServer` (a cap on open connections, a deadline for the
request head, no bodies), not prometheus_client's thread per connection: a flood of idle
connections must not take the daemon's file descriptors.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from typing import Callable

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, gzip_accepted

from .bounded_http import BoundedHTTPServer, Request, Response
from ..core.errors import SlurmDLError

PATHS = ("/metrics", "/")


class MetricsError(SlurmDLError, OSError):
    """The metrics port cannot be opened (in use, no permission)."""


def metrics_handler(registry: CollectorRegistry) -> Callable[[Request], Response]:
    """The answer to a request for ``registry``'s metrics."""

    def handle(request: Request) -> Response:
        if request.target.partition("?")[0] not in PATHS:
            return Response(404, b"not found; ask GET /metrics\n")
        encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        body = encoder(registry)
        if gzip_accepted(request.headers.get("accept-encoding", "")):
            return Response(200, gzip.compress(body), content_type, (("Content-Encoding", "gzip"),))
        return Response(200, body, content_type)

    return handle


@dataclass
class MetricsServer:
    address: str
    port: int
    _server: BoundedHTTPServer

    def close(self) -> None:
        self._server.close()


def serve_metrics(
    registry: CollectorRegistry, port: int, address: str = "0.0.0.0"
) -> MetricsServer:
    """Start serving ``registry`` on ``address:port`` in daemon threads."""
    try:
        server = BoundedHTTPServer(address, port, metrics_handler(registry), name="metrics")
    except OSError as e:
        raise MetricsError(
            f"metrics endpoint {address}:{port}: cannot listen: {e.strerror or e}"
        ) from None
    return MetricsServer(address, server.port, server)
