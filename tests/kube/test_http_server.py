"""The HTTP server under the fake API server and the health endpoints: limits, streams, aborts, stop.

Raw sockets where the bytes matter (half-sent requests, connection caps, the last chunk of a
stream), httpx where a client's view is the point. No test measures how long anything took:
each waits for an event, with a generous guard against hanging.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest

from usher.engine.backends.http_server import AbortConnection, HttpServer, Request, Response

GUARD = 10.0
"""Generous: how long a test waits for something that should happen well before."""


async def echo(request: Request) -> Response:
    return Response.json(200, {"method": request.method, "path": request.path, "body": request.body.decode()})


async def started(server: HttpServer) -> int:
    return await server.start("127.0.0.1", 0)


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def read_until_closed(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection (a reset counts as closed)."""
    data = bytearray()
    with contextlib.suppress(ConnectionResetError):
        while chunk := await asyncio.wait_for(reader.read(65536), GUARD):
            data += chunk
    return bytes(data)


async def get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str = "/") -> bytes:
    """One keep-alive GET on a raw connection; the response's head and body."""
    writer.write(f"GET {path} HTTP/1.1\r\nHost: test\r\n\r\n".encode())
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), GUARD)
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    return head + await asyncio.wait_for(reader.readexactly(length), GUARD)


async def until(condition, what: str) -> None:  # type: ignore[no-untyped-def]
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.01)

    try:
        await asyncio.wait_for(poll(), GUARD)
    except TimeoutError:
        pytest.fail(f"still waiting for {what}")


def close(writer: asyncio.StreamWriter) -> None:
    writer.close()


# --------------------------------------------------------------------------- reading requests


@pytest.mark.parametrize(
    "half",
    [
        b"GET /stalled HTTP/1.1\r\nHost: te",
        b"POST /stalled HTTP/1.1\r\nHost: test\r\nContent-Length: 10\r\n\r\nabc",
        b"POST /stalled HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n",
    ],
    ids=["headers", "body", "chunked-body"],
)
async def test_a_client_that_sends_half_a_request_and_stalls_is_disconnected(half: bytes) -> None:
    seen: list[str] = []

    async def handler(request: Request) -> Response:
        seen.append(request.path)
        return Response.text(200, "ok")

    server = HttpServer(handler, read_timeout=0.3, keepalive_timeout=3600)
    port = await started(server)
    try:
        reader, writer = await connect(port)
        writer.write(half)
        await writer.drain()
        assert await read_until_closed(reader) == b""
        close(writer)
        assert seen == []
        # the server itself is fine
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            assert (await client.get("/after")).text == "ok"
    finally:
        await server.stop()


async def test_the_read_timeout_does_not_limit_the_handler_or_an_idle_connection() -> None:
    """The deadline ends with the body: a slow handler answers, a kept-alive connection stays usable."""
    release = asyncio.Event()
    waiting = asyncio.Event()

    async def handler(request: Request) -> Response:
        if request.path == "/slow":
            waiting.set()
            await release.wait()
        return Response.text(200, request.path)

    server = HttpServer(handler, read_timeout=0.2, keepalive_timeout=3600)
    port = await started(server)
    try:
        reader, writer = await connect(port)
        writer.write(b"GET /slow HTTP/1.1\r\nHost: test\r\n\r\n")
        await writer.drain()
        await asyncio.wait_for(waiting.wait(), GUARD)
        await asyncio.sleep(0.6)  # three read timeouts with the handler busy
        release.set()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), GUARD)
        assert head.startswith(b"HTTP/1.1 200")
        assert await reader.readexactly(5) == b"/slow"
        await asyncio.sleep(0.6)  # idle, well past the read timeout
        assert (await get(reader, writer, "/again")).endswith(b"/again")
        close(writer)
    finally:
        await server.stop()


async def test_idle_connections_are_closed_after_the_keepalive_timeout() -> None:
    server = HttpServer(echo, keepalive_timeout=0.3)
    port = await started(server)
    try:
        reader, writer = await connect(port)
        assert b" 200 " in await get(reader, writer, "/x")
        assert await read_until_closed(reader) == b""
        close(writer)
        silent_reader, silent_writer = await connect(port)  # never sends a byte
        assert await read_until_closed(silent_reader) == b""
        close(silent_writer)
        await until(lambda: server.connections == 0, "the server to forget the connections")
    finally:
        await server.stop()


async def test_request_decoding_and_bodies() -> None:
    server = HttpServer(echo, max_body=10)
    port = await started(server)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            ok = await client.post("/a%20b", content=b"0123456789")
            assert ok.json() == {"method": "POST", "path": "/a b", "body": "0123456789"}
            assert (await client.post("/big", content=b"0123456789!")).status_code == 413

            async def chunks() -> AsyncIterator[bytes]:
                for _ in range(3):
                    yield b"0123"

            assert (await client.post("/big", content=chunks())).status_code == 413
        reader, writer = await connect(port)
        writer.write(b"GET /x HTTP/1.1\r\nHost: test\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
        await writer.drain()
        assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), GUARD) == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(b"hi")
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), GUARD)
        assert head.startswith(b"HTTP/1.1 200")
        close(writer)
    finally:
        await server.stop()


async def test_a_malformed_request_gets_400_and_a_failing_handler_500(caplog: pytest.LogCaptureFixture) -> None:
    async def handler(request: Request) -> Response:
        raise RuntimeError("boom")

    server = HttpServer(handler)
    port = await started(server)
    try:
        reader, writer = await connect(port)
        writer.write(b"GET /x HTTP/1.1\r\nHost: test\r\nContent-Length: nope\r\n\r\n")
        await writer.drain()
        assert b" 400 " in (await read_until_closed(reader)).split(b"\r\n")[0]
        close(writer)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            failed = await client.get("/x")
        assert (failed.status_code, failed.text) == (500, "internal server error")
        assert any("handler failed for GET /x" in r.getMessage() for r in caplog.records)
    finally:
        await server.stop()


# --------------------------------------------------------------------------- the connection cap


async def test_connections_over_the_cap_are_refused_while_open_ones_keep_working() -> None:
    server = HttpServer(echo, max_connections=2)
    port = await started(server)
    try:
        first, second = await connect(port), await connect(port)
        assert b"/one" in await get(*first, "/one")
        assert b"/two" in await get(*second, "/two")
        assert server.connections == 2
        for _ in range(3):
            reader, writer = await connect(port)
            refused = await read_until_closed(reader)
            assert refused == b"" or refused.startswith(b"HTTP/1.1 503 "), refused
            close(writer)
        assert b"/one-again" in await get(*first, "/one-again")
        assert b"/two-again" in await get(*second, "/two-again")
        close(first[1])
        await until(lambda: server.connections == 1, "a slot to free up")
        third = await connect(port)
        assert b"/three" in await get(*third, "/three")
        close(third[1])
        close(second[1])
    finally:
        await server.stop()


# --------------------------------------------------------------------------- streams


async def test_a_stream_outlives_the_read_and_keepalive_timeouts() -> None:
    closed = asyncio.Event()

    async def slow() -> AsyncIterator[bytes]:
        try:
            yield b"first\n"
            await asyncio.sleep(1.0)  # several read and keep-alive timeouts without a byte
            yield b"second\n"
        finally:
            closed.set()

    async def handler(request: Request) -> Response:
        return Response(200, {"content-type": "text/plain"}, stream=slow())

    server = HttpServer(handler, read_timeout=0.2, keepalive_timeout=0.2)
    port = await started(server)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client, client.stream("GET", "/") as response:
            lines = [line async for line in response.aiter_lines()]
        assert lines == ["first", "second"]
        await asyncio.wait_for(closed.wait(), GUARD)
    finally:
        await server.stop()


async def test_abort_mid_stream_breaks_the_connection() -> None:
    closed = asyncio.Event()

    async def broken() -> AsyncIterator[bytes]:
        try:
            yield b"one\n"
            yield b"two\n"
            raise AbortConnection
        finally:
            closed.set()

    async def handler(request: Request) -> Response:
        if request.path == "/now":
            raise AbortConnection
        return Response(200, {"content-type": "text/plain"}, stream=broken())

    server = HttpServer(handler)
    port = await started(server)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            received: list[str] = []
            with pytest.raises(httpx.RemoteProtocolError):
                async with client.stream("GET", "/") as response:
                    async for line in response.aiter_lines():
                        received.append(line)
            assert received == ["one", "two"]
            await asyncio.wait_for(closed.wait(), GUARD)
            with pytest.raises(httpx.RemoteProtocolError):
                await client.get("/now")
        # on the wire: the chunked body never gets its last chunk
        reader, writer = await connect(port)
        writer.write(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
        await writer.drain()
        raw = await read_until_closed(reader)
        assert b"transfer-encoding: chunked" in raw.lower() and b"two\n" in raw
        assert not raw.endswith(b"0\r\n\r\n")
        close(writer)
    finally:
        await server.stop()


async def test_a_client_that_leaves_mid_stream_gets_its_stream_closed() -> None:
    sent = asyncio.Event()
    closed = asyncio.Event()

    async def forever() -> AsyncIterator[bytes]:
        try:
            yield b"hello\n"
            sent.set()
            await asyncio.Event().wait()
        finally:
            closed.set()

    async def handler(request: Request) -> Response:
        return Response(200, {}, stream=forever())

    server = HttpServer(handler)
    port = await started(server)
    try:
        _, writer = await connect(port)
        writer.write(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
        await writer.drain()
        await asyncio.wait_for(sent.wait(), GUARD)
        close(writer)
        await asyncio.wait_for(closed.wait(), GUARD)
    finally:
        await server.stop()


async def test_stop_ends_a_watch_cleanly_and_lets_a_whole_response_finish() -> None:
    watching = asyncio.Event()
    watch_closed = asyncio.Event()
    slow_started = asyncio.Event()

    async def watch() -> AsyncIterator[bytes]:
        try:
            yield b'{"type":"ADDED"}\n'
            watching.set()
            await asyncio.Event().wait()
        finally:
            watch_closed.set()

    async def handler(request: Request) -> Response:
        if request.path == "/slow":
            slow_started.set()
            await asyncio.sleep(0.3)
            return Response.text(200, "finished")
        return Response(200, {"content-type": "application/json"}, stream=watch())

    server = HttpServer(handler, grace=GUARD)
    port = await started(server)
    reader, writer = await connect(port)
    writer.write(b"GET /watch HTTP/1.1\r\nHost: test\r\n\r\n")
    await writer.drain()
    await asyncio.wait_for(watching.wait(), GUARD)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        slow = asyncio.create_task(client.get("/slow"))
        await asyncio.wait_for(slow_started.wait(), GUARD)
        await server.stop()
        assert (await slow).text == "finished"
    raw = await read_until_closed(reader)
    close(writer)
    assert raw.endswith(b'{"type":"ADDED"}\n\r\n0\r\n\r\n')  # the stream's last chunk, then the close
    assert watch_closed.is_set()
    with pytest.raises(OSError):
        await connect(port)


async def test_a_stopped_server_starts_again() -> None:
    server = HttpServer(echo)
    port = await started(server)
    await server.stop()
    assert await server.start("127.0.0.1", port) == port
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            assert (await client.get("/back")).json()["path"] == "/back"
    finally:
        await server.stop()
