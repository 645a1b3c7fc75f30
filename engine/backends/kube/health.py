"""The controller's own HTTP endpoints: ``/metrics``, ``/healthz`` and ``/readyz``.

The kubelet probes ``/healthz`` (liveness: the process answers) and ``/readyz`` (readiness:
the informers have synced, so the controller's view of the cluster is whole); Prometheus scrapes
``/metrics``. All three are served by `HealthServer` on one port (`DEFAULT_PORT`, the
``metrics`` port of ``deploy/40-deployment.yaml``) through the small aiohttp-based server in
``engine/backends/http_server.py`` (its defaults bound how long a request may take to arrive, how
long a connection may idle and how many may be open).

The controller owns readiness: a new server is not ready ("informers have not synced"); the
controller calls `HealthServer.set_ready()` once its informers have listed everything, and
`HealthServer.set_not_ready(reason)` when that stops being true (a watch lost for good, shutting
down). ``/readyz`` answers 503 with that reason while not ready.

The node agent (``usher agent``) serves its own metrics the same way: anything with a
``render() -> bytes`` method in the Prometheus text format will do (``MetricsSource``).
"""

from __future__ import annotations

from enum import StrEnum
from http import HTTPStatus
from typing import Protocol

from ..http_server import HttpServer, Request, Response
from .metrics import CONTENT_TYPE

DEFAULT_HOST = "0.0.0.0"
"""All interfaces: the kubelet and Prometheus reach the pod on its IP."""

DEFAULT_PORT = 8080

NOT_SYNCED = "informers have not synced"
"""Why a controller that has just started is not ready."""


class Endpoint(StrEnum):
    METRICS = "/metrics"
    HEALTHZ = "/healthz"
    READYZ = "/readyz"


class MetricsSource(Protocol):
    def render(self) -> bytes:
        """Every series in the Prometheus text format (``CONTENT_TYPE``)."""
        ...


class HealthServer:
    """Serves the metrics and the health of one controller (or node agent) process."""

    def __init__(self, metrics: MetricsSource) -> None:
        self._metrics = metrics
        self._not_ready: str | None = NOT_SYNCED
        self._server = HttpServer(self.handle)

    @property
    def ready(self) -> bool:
        return self._not_ready is None

    @property
    def not_ready_reason(self) -> str | None:
        """Why ``/readyz`` answers 503, or None when ready."""
        return self._not_ready

    def set_ready(self) -> None:
        self._not_ready = None

    def set_not_ready(self, reason: str) -> None:
        self._not_ready = reason

    async def start(self, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> int:
        """Listen on ``host:port`` (0: any free port) and return the bound port."""
        return await self._server.start(host, port)

    async def stop(self) -> None:
        await self._server.stop()

    async def handle(self, request: Request) -> Response:
        """Answer one request (the `HttpServer` handler)."""
        try:
            endpoint = Endpoint(request.path)
        except ValueError:
            paths = ", ".join(Endpoint)
            return Response.text(HTTPStatus.NOT_FOUND, f"not found: {request.path} (serving {paths})")
        if request.method != "GET":
            response = Response.text(HTTPStatus.METHOD_NOT_ALLOWED, f"{request.method} not allowed: only GET")
            response.headers["allow"] = "GET"
            return response
        match endpoint:
            case Endpoint.METRICS:
                return Response(HTTPStatus.OK, {"content-type": CONTENT_TYPE}, self._metrics.render())
            case Endpoint.HEALTHZ:
                return Response.text(HTTPStatus.OK, "ok")
            case Endpoint.READYZ if self._not_ready is None:
                return Response.text(HTTPStatus.OK, "ok")
            case Endpoint.READYZ:
                return Response.text(HTTPStatus.SERVICE_UNAVAILABLE, f"not ready: {self._not_ready}")
