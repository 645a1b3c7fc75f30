"""Watch streams: one watch request's answer read as a stream of :class:`~.values.WatchEvent`.

A watch holds one connection of the transport's watches' pool for as long as it streams. Its
answer is newline-delimited JSON; a line may be longer than any buffer (a node with many images),
so the stream is split on newlines by hand rather than with aiohttp's ``readline``. An ERROR
event carries a ``Status`` and is raised as the same :class:`~.errors.ApiError` a request would
raise (``Gone`` for a resourceVersion too old to resume from). Resuming, relisting and backing off
are the informer's job (``kube/informer.py``); this module only reads one stream to its end.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable

from .errors import ApiError, api_error
from .transport import TRANSPORT_ERRORS, Reply, Transport, response_error
from .values import WatchEvent, WatchEventType, selector_params

WATCH_READ_GRACE = 30.0
"""Seconds past a watch's ``timeoutSeconds`` after which a silent stream counts as hung."""


async def watch_events(
    transport: Transport,
    path: str,
    *,
    resource_version: str,
    label_selector: str | None = None,
    field_selector: str | None = None,
    timeout_seconds: int = 300,
    on_open: Callable[[], None] | None = None,
) -> AsyncIterator[WatchEvent]:
    """The events of one watch of ``path`` from ``resource_version`` (see ``KubeClient.watch``)."""
    params = selector_params(label_selector, field_selector) | {
        "watch": "true",
        "allowWatchBookmarks": "true",
        "resourceVersion": resource_version,
        "timeoutSeconds": str(timeout_seconds),
    }
    response = await transport.open_stream(path, params, timeout_seconds + WATCH_READ_GRACE)
    ended = False
    try:
        if not 200 <= response.status < 300:
            body = await response.read()
            raise response_error(Reply(response.status, response.headers, body, response.charset))
        if on_open is not None:
            on_open()
        # lines of any length (aiohttp's readline refuses lines past its buffer's limit)
        rest = b""
        async for chunk in response.content.iter_any():
            lines = (rest + chunk).split(b"\n") if rest else chunk.split(b"\n")
            rest = lines.pop()
            for line in lines:
                if line.strip():
                    yield decode_event(line.decode("utf-8", errors="replace"))
        if rest.strip():
            yield decode_event(rest.decode("utf-8", errors="replace"))
        ended = True
    except TRANSPORT_ERRORS as exc:
        raise transport.unreachable(exc) from exc
    finally:
        if ended:
            response.release()  # read to its end: the connection may serve another watch
        else:
            response.close()


def decode_event(line: str) -> WatchEvent:
    """Decode one line of a watch stream; an ERROR event raises its Status as an ApiError."""
    try:
        data = json.loads(line)
        kind = WatchEventType(data["type"])
        obj = data["object"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ApiError(500, "BadWatchEvent", f"undecodable watch event: {line[:200]}") from exc
    if kind is WatchEventType.ERROR:
        raise api_error(int(obj.get("code") or 500), obj)
    return WatchEvent(kind, obj)
