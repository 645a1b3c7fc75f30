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
- the API server answers: the controller's client reports every exchange with it to
  `HealthServer.api_contact(ok, error)` (``KubeClient.add_contact_listener``): an answer that
  came back is contact, a timeout, a refused or broken connection or a 5xx is not. Once nothing
  has answered for longer than `API_GRACE`, the replica is not ready, whatever the failures were
  (a blip is not worth losing the endpoint for). Contact is the age of the last answer, not the
  state of the watches: a frozen API server keeps its watch sockets open and sends nothing, so
  taking open watches for contact would answer ``200 api: reachable`` all through a freeze while
  the Lease renewals time out. Events arriving on an open watch do not count
  either: they prove the socket, not that the server answers what the controller asks. No idle
  cluster is mistaken for a frozen one: the leader renews its Lease, and a standby reads it,
  every couple of seconds (``lease.py``), so some request is always due;
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
"""Seconds the API server may go without answering before ``/readyz`` fails: twice the leader
Lease's duration, so a replica goes unready only after it has lost (or could not take) the lead.
A frozen server makes ``/readyz`` fail within this long of its last answer."""

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
        #: when the API server last answered; when contact began to be watched (no answer yet)
        self._api_ok_at: float | None = None
        self._api_watched_since: float | None = None
        #: the last failure since the last answer
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
        """The API server answered a request (``ok``), or a request got no answer (``error`` says
        why: a timeout, a refused or broken connection, a 5xx). A 4xx is an answer.

        The controller passes this to its client (``KubeClient.add_contact_listener``), so every
        exchange is reported as it ends; readiness follows the age of the last answer."""
        now = self.clock()
        self.expect_api()
        if ok:
            self._api_ok_at = now
            self._api_error = None
        else:
            self._api_error = error

    def expect_api(self) -> None:
        """Start judging contact with the API server from now, before any exchange is reported
        (a server frozen from the start then fails the check too)."""
        if self._api_watched_since is None:
            self._api_watched_since = self.clock()

    def _api_silence(self, now: float) -> float | None:
        """Seconds since the API server last answered (or since contact was first expected)."""
        since = self._api_ok_at if self._api_ok_at is not None else self._api_watched_since
        return None if since is None else now - since

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
        silence = self._api_silence(now)
        if silence is not None and silence > self.api_grace:
            why = f" (last failure: {self._api_error})" if self._api_error else ""
            out.append(f"the API server has not answered for {silence:.0f}s{why}")
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
        silence = self._api_silence(now)
        if silence is not None:
            if self._api_error is not None or self._api_ok_at is None or silence > self.api_grace:
                why = f" ({self._api_error})" if self._api_error else ""
                out.append(f"api: no answer for {silence:.1f}s{why}; not ready after {self.api_grace:.0f}s")
            else:
                out.append(f"api: reachable, last answer {silence:.1f}s ago")
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
