"""usher's Events, recorded as kube's own components record theirs: a repeat is counted, not copied.

An Event that repeats one recorded a moment before (the same object, reason, message and type,
within ``AGGREGATE_WINDOW``) is written as client-go's event recorder writes it: the first
Event's ``count`` and ``lastTimestamp`` grow by a merge patch, so ``kubectl describe`` shows
``(x12 over 40m)`` on one line instead of twelve Event objects. An Event whose first copy is gone
(expired, deleted) is created anew. The cache is bounded (``CACHE_SIZE`` keys, least recently
used dropped first), as client-go's is. Records of one key are written one at a time, so two at
once make one Event counted twice, not two Events.
"""

from __future__ import annotations

import asyncio
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
    """The Event recorded for one key: its place (None until created), its count, when last."""

    namespace: str
    name: str | None
    count: int
    at: float
    lock: asyncio.Lock


class EventRecorder:
    """Creates usher's Events, counting repeats on the Event already there."""

    def __init__(self, client: KubeClient, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.clock = clock
        self._recent: OrderedDict[tuple[str, ...], _Recorded] = OrderedDict()

    async def record(self, about: ObjectRef, reason: str, message: str, type: EventType = EventType.NORMAL) -> None:
        key = (about.kind, about.namespace, about.name, about.uid, reason, message, str(type))
        entry = self._recent.get(key)
        if entry is None or self.clock() - entry.at > AGGREGATE_WINDOW:
            entry = _Recorded(about.namespace or "default", None, 0, self.clock(), asyncio.Lock())
            self._recent[key] = entry
        self._recent.move_to_end(key)
        while len(self._recent) > CACHE_SIZE:
            self._recent.popitem(last=False)
        async with entry.lock:
            entry.at = self.clock()
            if entry.name is not None:
                try:
                    await self.client.patch(EVENTS.path(entry.namespace, entry.name),
                                            {"count": entry.count + 1, "lastTimestamp": format_time(utcnow())})
                    entry.count += 1
                    return
                except NotFound:
                    pass  # the first copy expired: record it anew
            event = await self.client.create_event(about, reason, message, type)
            meta = event.get("metadata") or {}
            entry.namespace, entry.name, entry.count = meta.get("namespace", entry.namespace), meta.get("name"), 1
