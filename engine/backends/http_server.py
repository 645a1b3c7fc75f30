"""A small HTTP/1.1 server on aiohttp's low-level web server, for in-process endpoints.

usher serves a few HTTP endpoints of its own (the controller's ``/metrics``, ``/healthz`` and
``/readyz``; the sandbox's fake Kubernetes API server) and wants no routing framework for them.
This module is the whole interface: one coroutine handler per request, keep-alive connections,
request bodies, and responses that are either whole or streamed. aiohttp does the HTTP; this
module adds the request deadline, the connection cap, aborts and the way :meth:`HttpServer.stop`
ends streams.

Interface::

    async def handler(request: Request) -> Response:
        if request.path == "/healthz":
            return Response.text(200, "ok")
        return Response.json(404, {"error": "not found"})

    server = HttpServer(handler)
    port = await server.start(host="127.0.0.1", port=0)   # 0 picks a free port
    ...
    await server.stop()

``start(..., tls=context)`` serves HTTPS instead: every connection is TLS, with the certificate
and key loaded in that server-side ``ssl.SSLContext``; everything below holds as it is.

- :class:`Request` carries ``method`` (upper case), ``path`` (percent-decoded, without the
  query), ``query`` (``dict[str, list[str]]``, blank values kept; ``request.param(name)`` gives
  the first value), ``headers`` (lower-case names; repeated headers joined with ``", "``; each one's values
  apart from ``request.header_values(name)``) and ``body`` (bytes, whole).
- :class:`Response` carries ``status``, ``headers`` (a dict) and either ``body`` (bytes, sent
  with ``Content-Length``) or ``stream``: an async iterator of byte chunks, sent with chunked
  transfer encoding (close-delimited for HTTP/1.0 clients) as each chunk is produced. Streams
  suit watches and long polls; the iterator is closed (``aclose``) when the client goes away or
  the server stops, so ``finally`` blocks in an async generator run.
- If the client disconnects while its request is being handled or streamed, the handler's task
  is cancelled: a handler that waits on something (a delay, a queue) just sees ``CancelledError``.
- A handler (or a stream) that raises :class:`AbortConnection` gets the connection closed at
  once, mid-response if a stream had started: what a client sees when a peer or proxy resets it
  (no response, or a chunked body that never ends).
- A handler that raises gets a plain ``500`` (the exception is logged); a stream that raises
  after its response started gets its connection closed (logged too); a malformed request gets
  ``400`` and the connection is closed; a body over ``max_body`` gets ``413``.
- Limits, all constructor options:

  - ``read_timeout`` (30 s): from the first byte of a request to the end of its body. A client
    that sends half a request and stalls is disconnected when it runs out. It does not apply to
    handling the request or sending the response, so streams last as long as they like.
  - ``keepalive_timeout`` (75 s): how long a connection may sit idle between requests (or
    before its first one) before it is closed.
  - ``max_connections`` (1024): open connections at most. One more is answered ``503`` and
    closed at once rather than queued; the connections already open carry on.
  - ``max_body`` (16 MiB): the largest request body; larger ones get ``413``.
  - ``grace`` (5 s): see :meth:`HttpServer.stop`.

- :meth:`HttpServer.stop` stops accepting, closes idle keep-alive connections at once, ends
  streaming responses (the stream is cancelled and closed, the response terminated properly, so
  a watching client sees an ordinary end of stream), gives whole responses in flight ``grace``
  seconds to finish, then cancels whatever is left.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from aiohttp import HttpVersion11, web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY = 16 * 1024 * 1024
DEFAULT_READ_TIMEOUT = 30.0
DEFAULT_KEEPALIVE_TIMEOUT = 75.0
DEFAULT_MAX_CONNECTIONS = 1024
DEFAULT_GRACE = 5.0
TLS_SHUTDOWN_TIMEOUT = 1.0
"""Seconds a closing TLS connection waits for the peer's close_notify (asyncio's default is 30)."""

_FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding", "connection"})
"""Response headers the transport decides; a handler's values for them are dropped."""

_TOO_MANY_CONNECTIONS = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"content-type: text/plain; charset=utf-8\r\n"
    b"content-length: 21\r\n"
    b"retry-after: 1\r\n"
    b"connection: close\r\n"
    b"\r\n"
    b"too many connections\n"
)


@dataclass(slots=True)
class Request:
    """One HTTP request, its body read in full."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes = b""
    header_lines: dict[str, list[str]] = field(default_factory=dict)
    """Each header's values one by one, as sent (``headers`` joins repeated ones with ``", "``)."""

    def param(self, name: str, default: str | None = None) -> str | None:
        """The first value of query parameter ``name``, or ``default`` when absent."""
        values = self.query.get(name)
        return values[0] if values else default

    def header(self, name: str, default: str | None = None) -> str | None:
        """The value of header ``name`` (any case), or ``default`` when absent."""
        return self.headers.get(name.lower(), default)

    def header_values(self, name: str) -> list[str]:
        """Every value of header ``name`` (any case), one per header line, in the order sent."""
        key = name.lower()
        if key in self.header_lines:
            return list(self.header_lines[key])
        return [self.headers[key]] if key in self.headers else []


@dataclass(slots=True)
class Response:
    """A response: ``body`` sent whole, or ``stream`` sent chunk by chunk when it is set."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    stream: AsyncIterator[bytes] | None = None

    @classmethod
    def json(cls, status: int, obj: Any, headers: dict[str, str] | None = None) -> Response:
        """``obj`` encoded as compact JSON with ``Content-Type: application/json``."""
        body = json.dumps(obj, separators=(",", ":")).encode()
        return cls(status, {"content-type": "application/json", **(headers or {})}, body)

    @classmethod
    def text(cls, status: int, text: str, content_type: str = "text/plain; charset=utf-8") -> Response:
        """``text`` encoded as UTF-8 with the given content type."""
        return cls(status, {"content-type": content_type}, text.encode())


Handler = Callable[[Request], Awaitable[Response]]


class AbortConnection(Exception):
    """Raised by a handler or a stream: close the connection now, without (the rest of) a response."""


class _BodyTooLarge(Exception):
    """The request body exceeded the server's ``max_body``."""


class _Connection(RequestHandler):
    """aiohttp's connection, plus the deadline on reading a request and a place in the count.

    The deadline starts with the first byte of a request that arrives while the connection is
    idle and ends once the handler has read the body (:meth:`request_read`); if it passes first,
    the connection is closed. Bytes of a pipelined request that arrive while another is being
    answered start no deadline; aiohttp's keep-alive timeout covers that request if it stalls.
    """

    def __init__(self, owner: HttpServer, manager: web.Server, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.owner = owner
        self.busy = False
        self._deadline: asyncio.TimerHandle | None = None
        self._silent: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        # aiohttp before 3.14 starts its keep-alive timer only after a first response: close a
        # connection that never sends a byte ourselves.
        if self.owner.keepalive_timeout > 0:
            self._silent = self._loop.call_later(self.owner.keepalive_timeout, self._timed_out, "sent nothing")

    def data_received(self, data: bytes) -> None:
        if data and self._silent is not None:
            self._silent.cancel()
            self._silent = None
        if data and not self.busy and self._deadline is None and self.owner.read_timeout > 0:
            self._deadline = self._loop.call_later(self.owner.read_timeout, self._timed_out, "request not read in time")
        super().data_received(data)

    def request_read(self) -> None:
        """The request's body is in: stop its deadline."""
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _timed_out(self, why: str) -> None:
        self._deadline = self._silent = None
        log.debug("closing a connection from %s: %s", self._peer(), why)
        self.force_close()

    def _peer(self) -> Any:
        return None if self.transport is None else self.transport.get_extra_info("peername")

    def log_exception(self, *args: Any, **kwargs: Any) -> None:
        """aiohttp logs a malformed request as an error with a traceback: it is the client's, so one debug line."""
        exc = kwargs.get("exc_info")
        if isinstance(exc, HttpProcessingError):
            log.debug("malformed request from %s: %s", self._peer(), next(iter(str(exc.message).splitlines()), ""))
            return
        super().log_exception(*args, **kwargs)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.request_read()
        if self._silent is not None:
            self._silent.cancel()
            self._silent = None
        self.owner._connections.discard(self)
        super().connection_lost(exc)


class _Refused(asyncio.Protocol):
    """A connection over ``max_connections``: answered 503 and closed at once."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.write(_TOO_MANY_CONNECTIONS)
        transport.close()


class HttpServer:
    """Serves ``handler`` over HTTP/1.1 on one listening socket (see the module docstring)."""

    def __init__(
        self,
        handler: Handler,
        *,
        max_body: int = DEFAULT_MAX_BODY,
        grace: float = DEFAULT_GRACE,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        keepalive_timeout: float = DEFAULT_KEEPALIVE_TIMEOUT,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        self._handler = handler
        self.max_body = max_body
        self.grace = grace
        self.read_timeout = read_timeout
        """Seconds from a request's first byte to the end of its body (0: no limit)."""
        self.keepalive_timeout = keepalive_timeout
        """Seconds a connection may stay idle between requests (0: no limit)."""
        self.max_connections = max_connections
        self._web: web.Server | None = None
        self._listener: asyncio.Server | None = None
        self._connections: set[_Connection] = set()
        self._streams: set[asyncio.Task[None]] = set()
        self._stopping = False
        self._full = False
        self.port = 0

    @property
    def connections(self) -> int:
        """How many connections are open."""
        return len(self._connections)

    async def start(self, host: str = "127.0.0.1", port: int = 0, *, tls: ssl.SSLContext | None = None) -> int:
        """Listen on ``host:port`` (0: any free port) and return the bound port; with ``tls``
        (a server-side context holding the certificate), over HTTPS."""
        if self._listener is not None:
            raise RuntimeError("the server is already listening")
        self._stopping = False
        self._web = web.Server(self._serve, handler_cancellation=True)
        self._listener = await asyncio.get_running_loop().create_server(
            self._accept, host, port, ssl=tls, ssl_shutdown_timeout=TLS_SHUTDOWN_TIMEOUT if tls else None
        )
        self.port = self._listener.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        """Stop accepting, end every connection (see the module docstring) and return."""
        self._stopping = True
        listener, server = self._listener, self._web
        if listener is None or server is None:
            return
        listener.close()
        for stream in list(self._streams):
            stream.cancel()
        for conn in server.connections:
            conn.close()  # idle ones end now, busy ones after their response
        await server.shutdown(self.grace)
        await listener.wait_closed()
        self._listener = self._web = None

    def _accept(self) -> asyncio.Protocol:
        """A protocol for a new connection: aiohttp's, or a refusal once ``max_connections`` are open."""
        assert self._web is not None
        if len(self._connections) >= self.max_connections:
            if not self._full:
                log.warning("%d connections open: refusing more until some close", len(self._connections))
                self._full = True
            return _Refused()
        self._full = False
        conn = _Connection(
            self,
            self._web,
            loop=asyncio.get_running_loop(),
            keepalive_timeout=self.keepalive_timeout,
            access_log=None,
        )
        self._connections.add(conn)
        return conn

    # ------------------------------------------------------------------ one request

    async def _serve(self, raw: web.BaseRequest) -> web.StreamResponse:
        conn = raw.protocol
        assert isinstance(conn, _Connection)
        conn.busy = True
        try:
            try:
                body = await self._read_body(raw)
            except _BodyTooLarge:
                return _closing(web.Response(status=413, text="request body too large\n"))
            except web.RequestPayloadError as exc:
                return _closing(web.Response(status=400, text=f"bad request body: {exc}\n"))
            conn.request_read()
            request = _make_request(raw, body)
            try:
                response = await self._handler(request)
            except AbortConnection:
                return _abort(raw, web.Response())
            except Exception:
                log.exception("handler failed for %s %s", request.method, request.path)
                response = Response.text(500, "internal server error")
            if response.stream is None:
                whole = web.Response(status=int(response.status), headers=_headers(response), body=response.body)
                return _closing(whole) if self._stopping or _asks_close(response) else whole
            return await self._send_stream(raw, request, response.status, _headers(response), response.stream)
        finally:
            conn.request_read()
            conn.busy = False

    async def _read_body(self, raw: web.BaseRequest) -> bytes:
        length = raw.content_length
        if length is not None and length > self.max_body:
            raise _BodyTooLarge
        if raw.version == HttpVersion11 and raw.headers.get("expect", "").lower() == "100-continue":
            await raw.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            raw.writer.output_size = 0  # as aiohttp's own expect handler: the response proper has not started
        body = bytearray()
        while chunk := await raw.content.readany():
            body += chunk
            if len(body) > self.max_body:
                raise _BodyTooLarge
        return bytes(body)

    async def _send_stream(
        self, raw: web.BaseRequest, request: Request, status: int, headers: dict[str, str], stream: AsyncIterator[bytes]
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=int(status), headers=headers)
        pump = asyncio.create_task(_pump(raw, response, stream))
        self._streams.add(pump)
        if self._stopping:
            pump.cancel()
        try:
            await pump
        except asyncio.CancelledError:
            this = asyncio.current_task()
            if not (pump.cancelled() and self._stopping and this is not None and this.cancelling() == 0):
                raise
            # stop() ended the stream: finish the response properly, then close.
            response.force_close()
            try:
                await response.prepare(raw)
                await response.write_eof()
            except ConnectionError:
                return _abort(raw, response)
            return response
        except (AbortConnection, ConnectionError):
            return _abort(raw, response)
        except Exception:
            log.exception("stream failed for %s %s", request.method, request.path)
            return _abort(raw, response)
        finally:
            self._streams.discard(pump)
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
        try:
            await response.write_eof()
        except ConnectionError:
            return _abort(raw, response)
        return response


async def _pump(raw: web.BaseRequest, response: web.StreamResponse, stream: AsyncIterator[bytes]) -> None:
    """Send the status and headers, then each chunk of ``stream`` as it comes (the caller closes it)."""
    await response.prepare(raw)
    async for chunk in stream:
        if chunk:
            await response.write(chunk)


def _abort(raw: web.BaseRequest, response: web.StreamResponse) -> web.StreamResponse:
    """Close the connection now; aiohttp then fails to finish ``response`` and lets the connection go."""
    raw.protocol.force_close()
    return response


def _closing(response: web.StreamResponse) -> web.StreamResponse:
    response.force_close()
    return response


def _headers(response: Response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k.lower() not in _FRAMING_HEADERS}


def _asks_close(response: Response) -> bool:
    return any(k.lower() == "connection" and v.lower() == "close" for k, v in response.headers.items())


def _make_request(raw: web.BaseRequest, body: bytes) -> Request:
    target = urlsplit(raw.raw_path)
    headers: dict[str, str] = {}
    lines: dict[str, list[str]] = {}
    for name, value in raw.headers.items():
        key = name.lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
        lines.setdefault(key, []).append(value)
    return Request(
        method=raw.method.upper(),
        path=unquote(target.path),
        query=parse_qs(target.query, keep_blank_values=True),
        headers=headers,
        body=body,
        header_lines=lines,
    )
