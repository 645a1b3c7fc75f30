"""The controller's own HTTP endpoints: ``/metrics``, ``/healthz`` and ``/readyz``.

The kubelet probes ``/healthz`` (liveness: the process answers) and ``/readyz`` (readiness:
the informers have synced, so the controller's view of the cluster is whole); Prometheus scrapes
``/metrics``. All three are served by `HealthServer` on one port (`DEFAULT_PORT`, the
``metrics`` port of ``deploy/40-deployment.yaml``) through the small aiohttp-based server in
``engine/backends/http_server.py`` (its defaults bound how long a request may take to arrive, how
long a connection may idle and how many may be open).

The controller owns readiness, and ``/readyz`` tells the truth about it. Ready means all of:

- the informers have synced: a new server is not ready ("informers have not synced"); the
  controller calls `HealthServer.set_ready()` once its informers have listed everything, and
  `HealthServer.set_not_ready(reason)` when that stops being true (a watch lost for good,
  shutting down);
- the API server is reachable: the controller reports each answer or failure with
  `HealthServer.api_contact(ok)`; a failure makes the replica unready only once the API has
  been unreachable for longer than `API_GRACE` (a blip is not worth losing the endpoint for);
- the leader is scheduling: with `HealthServer.set_role(leader=True)` the controller says it
  holds the Lease, and it calls `HealthServer.cycle_done()` after every loop iteration that
  completed; a leader whose last good cycle (or whose taking the lead, if later) is older than
  `CYCLE_BOUND` is stuck and not ready. A standby is ready when it is synced and can reach the
  API: it must be able to take over.

Checks the process never reports (the node agent calls none of ``api_contact``, ``set_role``,
``cycle_done``) are not applied. ``/readyz`` answers ``200`` with ``ok`` on its first line, or
``503`` with ``not ready: `` and the reasons; the lines after it say the role, the API's
reachability and the age of the last good cycle, whichever are known.

The server's limits (`READ_TIMEOUT`, `KEEPALIVE_TIMEOUT`, `MAX_CONNECTIONS`) are tighter than
`HttpServer`'s defaults: only the kubelet and Prometheus ever call, with tiny requests.

The node agent (``usher agent``) serves its own metrics the same way: anything with a
``render() -> bytes`` method in the Prometheus text format will do (``MetricsSource``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
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

API_GRACE = 30.0
"""Seconds the API server may be unreachable before ``/readyz`` says so: twice the leader
Lease's duration, so a replica goes unready only after it has lost (or could not take) the lead."""

CYCLE_BOUND = 60.0
"""Seconds a leader may go without a good scheduling cycle before ``/readyz`` says it is stuck.
The loop runs at least once a second; a cycle of a huge cluster takes seconds, not a minute."""

READ_TIMEOUT = 10.0
"""Seconds a request may take to arrive whole (a probe or a scrape is one small GET)."""

KEEPALIVE_TIMEOUT = 75.0
"""Seconds a connection may idle between requests (longer than a 60 s scrape interval)."""

MAX_CONNECTIONS = 64
"""Open connections at most: the kubelet and a few Prometheus replicas need a handful."""


class Role(StrEnum):
    LEADER = "leader"
    STANDBY = "standby"


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

    def __init__(
        self,
        metrics: MetricsSource,
        *,
        clock: Callable[[], float] = time.monotonic,
        api_grace: float = API_GRACE,
        cycle_bound: float = CYCLE_BOUND,
        read_timeout: float = READ_TIMEOUT,
        keepalive_timeout: float = KEEPALIVE_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self._metrics = metrics
        self._not_ready: str | None = NOT_SYNCED
        self.clock = clock
        """Seconds, for the ages ``/readyz`` reports (monotonic: wall-clock jumps do not count)."""
        self.api_grace = api_grace
        self.cycle_bound = cycle_bound
        self._role: Role | None = None
        self._led_since: float | None = None
        self._api_ok_at: float | None = None
        self._api_down_since: float | None = None
        self._api_error: str | None = None
        self._cycle_at: float | None = None
        self._server = HttpServer(
            self.handle, read_timeout=read_timeout, keepalive_timeout=keepalive_timeout, max_connections=max_connections
        )

    @property
    def server(self) -> HttpServer:
        """The HTTP server underneath (its limits, its open connections)."""
        return self._server

    @property
    def ready(self) -> bool:
        return not self.problems()

    @property
    def not_ready_reason(self) -> str | None:
        """Why ``/readyz`` answers 503, or None when ready."""
        problems = self.problems()
        return "; ".join(problems) if problems else None

    def set_ready(self) -> None:
        """The informers have synced."""
        self._not_ready = None

    def set_not_ready(self, reason: str) -> None:
        self._not_ready = reason

    def api_contact(self, ok: bool, error: str | None = None) -> None:
        """The API server answered (``ok``), or could not be reached (``error`` says how).

        Call it on every outcome that says something about reachability: a list, a watch event
        or a Lease renewal that came back is ``True``; a connection refused, a timeout or a 5xx
        is ``False``. A 4xx is an answer: the API is reachable.
        """
        now = self.clock()
        if ok:
            self._api_ok_at = now
            self._api_down_since = None
            self._api_error = None
        else:
            if self._api_down_since is None:
                self._api_down_since = now
            self._api_error = error

    def set_role(self, leader: bool) -> None:
        """Whether this replica holds the leader Lease now."""
        role = Role.LEADER if leader else Role.STANDBY
        if role is Role.LEADER and self._role is not Role.LEADER:
            self._led_since = self.clock()
        self._role = role

    def cycle_done(self) -> None:
        """A loop iteration (the scheduling cycle when leading) completed without error."""
        self._cycle_at = self.clock()

    def problems(self) -> list[str]:
        """Why the process is not ready; empty when it is."""
        now = self.clock()
        out = []
        if self._not_ready is not None:
            out.append(self._not_ready)
        if self._api_down_since is not None and now - self._api_down_since > self.api_grace:
            out.append(f"the API server has been unreachable for {now - self._api_down_since:.0f}s")
        if self._role is Role.LEADER and self._not_ready is None:
            since = max(t for t in (self._cycle_at, self._led_since) if t is not None)
            if now - since > self.cycle_bound:
                what = "no good scheduling cycle" if self._cycle_at is not None else "no scheduling cycle yet"
                out.append(f"leader with {what} for {now - since:.0f}s (bound {self.cycle_bound:.0f}s)")
        return out

    def details(self) -> list[str]:
        """What ``/readyz`` says after its first line: role, API reachability, last good cycle."""
        now = self.clock()
        out = []
        if self._role is not None:
            out.append(f"role: {self._role}")
        if self._api_down_since is not None:
            why = f" ({self._api_error})" if self._api_error else ""
            out.append(
                f"api: unreachable for {now - self._api_down_since:.1f}s{why}; not ready after {self.api_grace:.0f}s"
            )
        elif self._api_ok_at is not None:
            out.append(f"api: reachable, last answer {now - self._api_ok_at:.1f}s ago")
        if self._cycle_at is not None:
            out.append(f"last good cycle: {now - self._cycle_at:.1f}s ago")
        elif self._role is not None:
            out.append("last good cycle: none yet")
        return out

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
            case Endpoint.READYZ:
                problems = self.problems()
                first = f"not ready: {'; '.join(problems)}" if problems else "ok"
                body = "\n".join([first, *self.details()])
                return Response.text(HTTPStatus.SERVICE_UNAVAILABLE if problems else HTTPStatus.OK, body)
