"""usher's Events, recorded as kube's own components record theirs: a repeat is counted, not copied.

An Event that repeats one recorded a moment before (the same object, reason, message and type,
within ``AGGREGATE_WINDOW``) is written as client-go's event recorder writes it: the first
Event's ``count`` and ``lastTimestamp`` grow by a merge patch, so ``kubectl describe`` shows
``(x12 over 40m)`` on one line instead of twelve Event objects. An Event whose first copy is gone
(expired, deleted) is created anew. The cache is bounded (``CACHE_SIZE`` keys, least recently
used dropped first), as client-go's is.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from .client import EVENTS, EventType, KubeClient, NotFound, ObjectRef, format_time, utcnow

AGGREGATE_WINDOW = 600.0
"""Seconds after which a repeat is a new Event rather than one more count of the last."""
CACHE_SIZE = 4096


@dataclass(slots=True)
class _Recorded:
    namespace: str
    name: str
    count: int
    at: float


class EventRecorder:
    """Creates usher's Events, counting repeats on the Event already there."""

    def __init__(self, client: KubeClient, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.clock = clock
        self._recent: OrderedDict[tuple[str, ...], _Recorded] = OrderedDict()

    async def record(self, about: ObjectRef, reason: str, message: str, type: EventType = EventType.NORMAL) -> None:
        key = (about.kind, about.namespace, about.name, about.uid, reason, message, str(type))
        now = self.clock()
        seen = self._recent.get(key)
        if seen is not None and now - seen.at <= AGGREGATE_WINDOW:
            seen.count += 1
            seen.at = now
            self._recent.move_to_end(key)
            try:
                await self.client.patch(EVENTS.path(seen.namespace, seen.name),
                                        {"count": seen.count, "lastTimestamp": format_time(utcnow())})
                return
            except NotFound:
                pass  # the first copy expired: record it anew
        event = await self.client.create_event(about, reason, message, type)
        meta = event.get("metadata") or {}
        self._recent[key] = _Recorded(meta.get("namespace", about.namespace or "default"), meta.get("name", ""), 1, now)
        self._recent.move_to_end(key)
        while len(self._recent) > CACHE_SIZE:
            self._recent.popitem(last=False)
