"""Committed versions of objects and what watchers see of them.

:class:`Stored` is one committed version (the object and its JSON, never mutated after commit);
:class:`Change` a commit as the store records it, :class:`WatchEvent` one as a watch sends it
(a change that leaves or enters a filter is a ``DELETED`` or ``ADDED`` to that watcher), and
:class:`Subscription` a watcher's queue. :class:`ListResult` is one page of a list. Kept apart
from the store so that the HTTP front and the controllers can hold these records without the
store's write path.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Self

from .kinds import ResourceType
from .api_errors import ApiError
from .selection import Filter

JsonObject = dict[str, Any]


# --------------------------------------------------------------------------- stored objects and changes


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _copy(value: Any) -> Any:
    """A deep copy of a JSON value (and a check that it is one)."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise ApiError.bad_request(f"not a JSON object: {exc}") from None


@dataclass(frozen=True, slots=True)
class Stored:
    """One committed version of an object: never mutated after commit."""

    obj: JsonObject
    raw: bytes
    """The object as JSON, ``apiVersion`` and ``kind`` first."""
    item_raw: bytes
    """The object as a typed list's item (without ``apiVersion``/``kind`` unless a custom resource)."""
    rv: int

    @classmethod
    def encode(cls, rt: ResourceType, obj: JsonObject, rv: int) -> Stored:
        body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
        body_raw = _dumps(body)
        head = b'{"apiVersion":%s,"kind":%s' % (_dumps(rt.api_version), _dumps(rt.kind))
        raw = head + (b"," + body_raw[1:] if len(body_raw) > 2 else b"}")
        full = {"apiVersion": rt.api_version, "kind": rt.kind, **body}
        return cls(full, raw, raw if rt.custom else body_raw, rv)

    def copy(self) -> JsonObject:
        return json.loads(self.raw)


class EventType(StrEnum):
    """Watch event types."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    BOOKMARK = "BOOKMARK"
    ERROR = "ERROR"


@dataclass(frozen=True, slots=True)
class Change:
    """One committed write: ``new`` is the object after it (the last state, for a delete)."""

    type: EventType
    rt: ResourceType
    new: Stored
    old: Stored | None

    @property
    def rv(self) -> int:
        return self.new.rv


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """What a watcher receives: the event type and the object's committed version."""

    type: EventType
    stored: Stored

    @property
    def resource_version(self) -> str:
        return str(self.stored.rv)

    @property
    def object(self) -> JsonObject:
        """A fresh copy of the object."""
        return self.stored.copy()

    def line(self) -> bytes:
        """The event as one line of a watch stream."""
        return b'{"type":"%s","object":%s}\n' % (self.type.encode(), self.stored.raw)


def watch_event_for(change: Change, flt: Filter) -> WatchEvent | None:
    """The event a watcher with ``flt`` sees for ``change``, as the watch cache decides it.

    An object that starts matching arrives as ``ADDED``, one that stops matching as ``DELETED``.
    """
    now = flt.matches(change.new.obj)
    before = change.old is not None and change.type is EventType.MODIFIED and flt.matches(change.old.obj)
    if change.type is EventType.MODIFIED:
        if now and before:
            return WatchEvent(EventType.MODIFIED, change.new)
        if now:
            return WatchEvent(EventType.ADDED, change.new)
        return WatchEvent(EventType.DELETED, change.new) if before else None
    return WatchEvent(change.type, change.new) if now else None


class Subscription:
    """Live watch events of one resource through one filter; an async iterator of :class:`WatchEvent`.

    Events already due when it was opened (history, or the synthetic ``ADDED`` events of a watch
    without a resourceVersion) come first, then live ones, with no gap and no repeat. A subscriber
    that falls more than ``buffer`` live events behind is closed, as the real watch cache drops
    unresponsive watchers: it still gets what was queued, then the end, and resumes from the last
    resourceVersion it saw.
    """

    def __init__(self, unsubscribe: Callable[[Subscription], None], rt: ResourceType, flt: Filter, backlog: Sequence[WatchEvent],
                 buffer: int) -> None:
        self.rt = rt
        self.filter = flt
        self._unsubscribe = unsubscribe
        """The store's way to forget this subscription once it is closed."""
        self._queue: asyncio.Queue[WatchEvent | None] = asyncio.Queue()
        for event in backlog:
            self._queue.put_nowait(event)
        self._limit = len(backlog) + buffer
        self.closed = False

    def offer(self, change: Change) -> None:
        event = watch_event_for(change, self.filter)
        if event is None:
            return
        if self._queue.qsize() >= self._limit:
            self.close()
        else:
            self._queue.put_nowait(event)

    def pending(self) -> int:
        """How many events are queued, not yet taken."""
        return self._queue.qsize()

    def take(self) -> WatchEvent | None:
        """The next event if one is queued already, else ``None`` (without waiting)."""
        return None if self._queue.empty() else self._queue.get_nowait()

    async def get(self, timeout: float | None = None) -> WatchEvent | None:
        """The next event, or ``None`` after ``timeout`` seconds without one or once closed."""
        if not self._queue.empty():
            return self._queue.get_nowait()
        if self.closed:
            return None
        try:
            async with asyncio.timeout(timeout):  # not wait_for: it can eat a cancel on 3.11
                return await self._queue.get()
        except TimeoutError:
            return None

    def close(self) -> None:
        """Stop receiving; a pending ``get`` returns ``None``."""
        if not self.closed:
            self.closed = True
            self._unsubscribe(self)
            self._queue.put_nowait(None)

    def __aiter__(self) -> AsyncIterator[WatchEvent]:
        return self

    async def __anext__(self) -> WatchEvent:
        event = await self.get()
        if event is None:
            raise StopAsyncIteration
        return event

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(slots=True)
class ListResult:
    """A page of a list: the items, the list's resourceVersion and how to get the next page."""

    rt: ResourceType
    items: list[Stored]
    resource_version: int
    continue_token: str = ""
    remaining: int | None = None

    def objects(self) -> list[JsonObject]:
        return [item.copy() for item in self.items]

    def metadata(self) -> JsonObject:
        """The list's ``metadata`` (ListMeta)."""
        meta: JsonObject = {"resourceVersion": str(self.resource_version)}
        if self.continue_token:
            meta["continue"] = self.continue_token
        if self.remaining is not None:
            meta["remainingItemCount"] = self.remaining
        return meta

    def raw(self) -> bytes:
        """The list as a ``<Kind>List`` JSON document."""
        head = b'{"kind":%s,"apiVersion":%s,"metadata":%s,"items":[' % (
            _dumps(self.rt.kind + "List"),
            _dumps(self.rt.api_version),
            _dumps(self.metadata()),
        )
        return head + b",".join(item.item_raw for item in self.items) + b"]}"
