"""A small asyncio HTTP/1.1 server on top of ``h11``, for in-process endpoints.

usher serves a few HTTP endpoints of its own (the controller's ``/metrics``, ``/healthz`` and
``/readyz``; the sandbox's fake Kubernetes API server) and wants neither a web framework nor an
ASGI server for them. This module is the whole transport: one coroutine handler per request,
keep-alive connections, request bodies, and responses that are either whole or streamed.

Interface::

    async def handler(request: Request) -> Response:
        if request.path == "/healthz":
            return Response.text(200, "ok")
        return Response.json(404, {"error": "not found"})

    server = HttpServer(handler)
    port = await server.start(host="127.0.0.1", port=0)   # 0 picks a free port
    ...
    await server.stop()

- :class:`Request` carries ``method`` (upper case), ``path`` (percent-decoded, without the
  query), ``query`` (``dict[str, list[str]]``, blank values kept; ``request.param(name)`` gives
  the first value), ``headers`` (lower-case names; repeated headers joined with ``", "``) and
  ``body`` (bytes, whole).
- :class:`Response` carries ``status``, ``headers`` (a dict) and either ``body`` (bytes, sent
  with ``Content-Length``) or ``stream``: an async iterator of byte chunks, sent with chunked
  transfer encoding (close-delimited for HTTP/1.0 clients) as each chunk is produced. Streams
  suit watches and long polls; the iterator is closed (``aclose``) when the client goes away or
  the server stops, so ``finally`` blocks in an async generator run.
- If the client disconnects while its request is being handled or streamed, the handler's task
  is cancelled: a handler that waits on something (a delay, a queue) just sees ``CancelledError``.
- A handler (or a stream) that raises :class:`AbortConnection` gets the connection closed at
  once, mid-response if a stream had started: what a client sees when a peer or proxy resets it.
- A handler that raises gets a plain ``500`` (the exception is logged); a malformed request gets
  ``400`` and the connection is closed; a body over ``max_body`` gets ``413``.
- :meth:`HttpServer.stop` stops accepting, closes idle keep-alive connections at once, ends
  streaming responses (the stream is cancelled, the response terminated properly, so a watching
  client sees an ordinary end of stream), gives whole responses in flight ``grace`` seconds to finish, then cancels
  whatever is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import h11

log = logging.getLogger(__name__)

_READ_SIZE = 65536
_DEFAULT_MAX_BODY = 16 * 1024 * 1024


@dataclass(slots=True)
class Request:
    """One HTTP request, its body read in full."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes = b""

    def param(self, name: str, default: str | None = None) -> str | None:
        """The first value of query parameter ``name``, or ``default`` when absent."""
        values = self.query.get(name)
        return values[0] if values else default

    def header(self, name: str, default: str | None = None) -> str | None:
        """The value of header ``name`` (any case), or ``default`` when absent."""
        return self.headers.get(name.lower(), default)


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


class _Phase(Enum):
    """What a connection is doing, which decides how :meth:`HttpServer.stop` ends it."""

    IDLE = auto()
    RESPONDING = auto()
    STREAMING = auto()


class _ClientGone(Exception):
    """The peer closed the connection or the request could not be read."""


class _BodyTooLarge(Exception):
    """The request body exceeded the server's ``max_body``."""


_QUIET_ENDS = (AbortConnection, ConnectionError, asyncio.CancelledError)
"""How a response may end early without it being worth a log line."""


@dataclass(slots=True, eq=False)
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    protocol: h11.Connection
    phase: _Phase = _Phase.IDLE
    task: asyncio.Task[None] | None = None


class HttpServer:
    """Serves ``handler`` over HTTP/1.1 on one listening socket."""

    def __init__(self, handler: Handler, *, max_body: int = _DEFAULT_MAX_BODY, grace: float = 5.0) -> None:
        self._handler = handler
        self._max_body = max_body
        self._grace = grace
        self._server: asyncio.Server | None = None
        self._connections: set[_Connection] = set()
        self._stopping = False
        self.port = 0

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Listen on ``host:port`` (0: any free port) and return the bound port."""
        self._stopping = False
        self._server = await asyncio.start_server(self._on_connect, host, port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        """Stop accepting, end every connection (see the module docstring) and return."""
        self._stopping = True
        if self._server is not None:
            self._server.close()
        for conn in list(self._connections):
            if conn.phase is not _Phase.RESPONDING and conn.task is not None:
                conn.task.cancel()
        tasks = [c.task for c in self._connections if c.task is not None]
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=self._grace)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Connection(reader, writer, h11.Connection(h11.SERVER))
        conn.task = asyncio.current_task()
        self._connections.add(conn)
        try:
            await self._serve(conn)
        except (_ClientGone, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._connections.discard(conn)
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await writer.wait_closed()

    async def _serve(self, conn: _Connection) -> None:
        while not self._stopping:
            conn.phase = _Phase.IDLE
            try:
                request = await self._read_request(conn)
            except h11.RemoteProtocolError as exc:
                await self._send_error(conn, exc.error_status_hint, str(exc))
                return
            except _BodyTooLarge:
                await self._send_error(conn, 413, "request body too large")
                return
            if request is None:
                return
            conn.phase = _Phase.RESPONDING
            if not await self._respond_while_connected(conn, request):
                return
            if conn.protocol.our_state is not h11.DONE or conn.protocol.their_state is not h11.DONE:
                return
            conn.protocol.start_next_cycle()

    async def _next_event(self, conn: _Connection) -> Any:
        """The next h11 event, reading from the socket as needed."""
        while True:
            event = conn.protocol.next_event()
            if event is not h11.NEED_DATA:
                return event
            data = await conn.reader.read(_READ_SIZE)
            conn.protocol.receive_data(data)

    async def _read_request(self, conn: _Connection) -> Request | None:
        """The next request with its body, or ``None`` once the client closed the connection."""
        event = await self._next_event(conn)
        if isinstance(event, h11.ConnectionClosed):
            return None
        if not isinstance(event, h11.Request):
            raise _ClientGone
        if conn.protocol.they_are_waiting_for_100_continue:
            await self._send(conn, h11.InformationalResponse(status_code=100, headers=[]))
        body = bytearray()
        while True:
            part = await self._next_event(conn)
            if isinstance(part, h11.Data):
                body += part.data
                if len(body) > self._max_body:
                    raise _BodyTooLarge
            elif isinstance(part, h11.EndOfMessage):
                return _make_request(event, bytes(body))
            else:
                raise _ClientGone

    async def _respond_while_connected(self, conn: _Connection, request: Request) -> bool:
        """Handle ``request`` and send the response; ``False`` if the client left before the end."""
        responding = asyncio.create_task(self._respond(conn, request))
        watching = asyncio.create_task(self._watch_for_close(conn))
        try:
            await asyncio.wait({responding, watching}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (responding, watching):
                task.cancel()
            outcome, _ = await asyncio.gather(responding, watching, return_exceptions=True)
        if isinstance(outcome, BaseException) and not isinstance(outcome, _QUIET_ENDS):
            log.error("response to %s %s failed", request.method, request.path, exc_info=outcome)
        return outcome is None

    async def _watch_for_close(self, conn: _Connection) -> None:
        """Feed h11 whatever the client sends while we respond; return when it hangs up."""
        while True:
            data = await conn.reader.read(_READ_SIZE)
            conn.protocol.receive_data(data)
            if not data:
                return

    async def _respond(self, conn: _Connection, request: Request) -> None:
        try:
            response = await self._handler(request)
        except AbortConnection:
            raise
        except Exception:
            log.exception("handler failed for %s %s", request.method, request.path)
            response = Response.text(500, "internal server error")
        if response.stream is None:
            await self._send_whole(conn, response)
        else:
            conn.phase = _Phase.STREAMING
            await self._send_stream(conn, response.status, response.headers, response.stream)

    async def _send_whole(self, conn: _Connection, response: Response) -> None:
        headers = {**response.headers, "content-length": str(len(response.body))}
        if self._stopping:
            headers["connection"] = "close"
        await self._send(conn, h11.Response(status_code=response.status, headers=list(headers.items())))
        if response.body:
            await self._send(conn, h11.Data(data=response.body))
        await self._send(conn, h11.EndOfMessage())

    async def _send_stream(
        self, conn: _Connection, status: int, headers: dict[str, str], stream: AsyncIterator[bytes]
    ) -> None:
        try:
            await self._send(conn, h11.Response(status_code=status, headers=list(headers.items())))
            try:
                async for chunk in stream:
                    if chunk:
                        await self._send(conn, h11.Data(data=chunk))
            except asyncio.CancelledError:
                if not self._stopping:
                    raise
            await self._send(conn, h11.EndOfMessage())
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _send_error(self, conn: _Connection, status: int, message: str) -> None:
        if conn.protocol.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        with contextlib.suppress(h11.LocalProtocolError, ConnectionError):
            response = Response.text(status, message + "\n")
            response.headers["connection"] = "close"
            await self._send_whole(conn, response)

    async def _send(self, conn: _Connection, event: Any) -> None:
        data = conn.protocol.send(event)
        if data:
            conn.writer.write(data)
            await conn.writer.drain()


def _make_request(event: h11.Request, body: bytes) -> Request:
    target = urlsplit(event.target.decode("ascii", "replace"))
    headers: dict[str, str] = {}
    for name, value in event.headers:
        key = name.decode("ascii", "replace").lower()
        text = value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return Request(
        method=event.method.decode("ascii", "replace").upper(),
        path=unquote(target.path),
        query=parse_qs(target.query, keep_blank_values=True),
        headers=headers,
        body=body,
    )
