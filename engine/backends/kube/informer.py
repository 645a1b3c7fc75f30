"""Informers: an always-current local copy of one kind of object, and each change to it.

An :class:`Informer` lists a collection path (with label and field selectors), then watches it
from the list's resourceVersion with bookmarks on, keeping a cache keyed ``namespace/name``
(``name`` for cluster-scoped objects). Every change is handed to the consumer's ``on_event``
callback as ``(DeltaType, object)``. A callback (rather than a queue owned here) lets the
consumer put changes from several informers into one queue of its own, tagged by source, and
wake its loop; the callback runs inside the informer's task, so it must be quick and not raise.

Resuming without losing or repeating a change:

- the last resourceVersion seen (an event's, or a bookmark's) is where the next watch starts
  after a stream ends or breaks, so nothing in between is missed;
- what is delivered is decided against the cache, not taken from the event type: an object
  whose resourceVersion the cache already holds is a repeat and is skipped, a DELETED for an
  object not in the cache is skipped, an ADDED for a cached object is a MODIFIED, and a new uid
  under a known name is a DELETED of the old object then an ADDED;
- 410 Gone (the resourceVersion is too old) lists again and delivers the difference against the
  cache, including a DELETED (with the last state seen) for each object that vanished while the
  informer was not watching.

Failures back off exponentially with jitter (capped), and a 429 waits its ``Retry-After``. A
stream that delivered something (or ran for most of its ``timeoutSeconds``) is resumed at once;
one that delivered nothing counts as a failure, so a server that closes every watch at once is
not hammered. ``has_synced`` is set
once the first list has been delivered.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import aclosing
from enum import StrEnum
from types import MappingProxyType

from .client import (
    Backoff,
    Gone,
    KubeClient,
    KubeError,
    NotFound,
    Obj,
    Objs,
    TooManyRequests,
    WatchEvent,
    WatchEventType,
)

log = logging.getLogger(__name__)


class DeltaType(StrEnum):
    """What happened to an object, as the informer's consumer is told."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


OnEvent = Callable[[DeltaType, Obj], None]


def object_key(obj: Obj) -> str:
    """``namespace/name``, or ``name`` for a cluster-scoped object."""
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    return f"{namespace}/{metadata['name']}" if namespace else str(metadata["name"])


def _resource_version(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


def _uid(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("uid", ""))


class Informer:
    """List-then-watch one collection, keep a cache and report every change to ``on_event``.

    ``optional`` is for resources the cluster may not serve (a CRD that is not installed): a 404
    on the list counts as an empty list (so the informer still syncs) and is asked again later.
    ``watch_timeout`` is the server-side length of one watch, randomised up to twice as long.
    ``sleep`` is how the informer waits between attempts (injectable, so tests see the pauses).
    """

    def __init__(
        self,
        client: KubeClient,
        path: str,
        *,
        on_event: OnEvent,
        label_selector: str | None = None,
        field_selector: str | None = None,
        optional: bool = False,
        page_size: int = 500,
        watch_timeout: int = 300,
        backoff: Backoff | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.path = path
        self.has_synced = asyncio.Event()
        self.resource_version = ""
        self._client = client
        self._on_event = on_event
        self._label_selector = label_selector
        self._field_selector = field_selector
        self._optional = optional
        self._page_size = page_size
        self._watch_timeout = watch_timeout
        self._backoff = backoff or Backoff(base=0.2, cap=30.0)
        self._sleep = sleep
        self._cache: dict[str, Obj] = {}
        self._quiet = 0
        self._task: asyncio.Task[None] | None = None

    @property
    def cache(self) -> Mapping[str, Obj]:
        """The objects as last seen, by key (read-only)."""
        return MappingProxyType(self._cache)

    async def run(self) -> None:
        """List, then watch and re-watch until :meth:`stop` (or cancellation)."""
        self._task = asyncio.current_task()
        while True:
            self._quiet += 1
            wait = await self._attempt()
            if self._quiet:
                await self._sleep(self._pause(wait))

    def stop(self) -> None:
        """Stop :meth:`run` (it ends with CancelledError in its own task)."""
        if self._task is not None:
            self._task.cancel()

    async def _attempt(self) -> float | None:
        """List if needed, then watch until the stream ends. Returns how long to wait before the
        next attempt when that is not up to the backoff (a Retry-After; a resource not served)."""
        try:
            if not self.resource_version and not await self._relist():
                return self._backoff.cap
            await self._watch()
        except Gone:
            log.info("%s: resourceVersion %s is too old; listing again", self.path, self.resource_version)
            self.resource_version = ""
        except KubeError as exc:
            # a stream that broke after delivering something is routine (proxies, restarts)
            log.log(logging.INFO if self._quiet == 0 else logging.WARNING, "%s: %s", self.path, exc)
            if isinstance(exc, TooManyRequests):
                return exc.retry_after
        return None

    def _pause(self, wait: float | None) -> float:
        if wait is not None:
            return min(wait, self._backoff.cap)
        return self._backoff.delay(self._quiet)

    async def _relist(self) -> bool:
        """List and report the differences; False if an optional resource is not served."""
        try:
            listed = await self._client.list(
                self.path,
                label_selector=self._label_selector,
                field_selector=self._field_selector,
                limit=self._page_size,
            )
        except NotFound:
            if not self._optional:
                raise
            log.info("%s is not served; treating it as empty and asking again later", self.path)
            self._replace([])
            return False
        self._replace(listed.items)
        self.resource_version = listed.resource_version
        return True

    def _replace(self, items: Objs) -> None:
        """Make the cache what a fresh list says, reporting every difference."""
        listed = {object_key(obj): obj for obj in items}
        for key in self._cache.keys() - listed.keys():
            self._remove(key, self._cache[key])
        for obj in listed.values():
            self._upsert(obj)
        self.has_synced.set()

    async def _watch(self) -> None:
        timeout = int(self._watch_timeout * random.uniform(1.0, 2.0))
        events = self._client.watch(
            self.path,
            resource_version=self.resource_version,
            label_selector=self._label_selector,
            field_selector=self._field_selector,
            timeout_seconds=timeout,
        )
        started = time.monotonic()
        async with aclosing(events):
            async for event in events:
                self._handle(event)
        if time.monotonic() - started >= timeout / 2:
            self._quiet = 0  # a quiet stream that lasted its time is healthy too

    def _handle(self, event: WatchEvent) -> None:
        self._quiet = 0
        if event.type is WatchEventType.DELETED:
            self._remove(object_key(event.object), event.object)
        elif event.type is not WatchEventType.BOOKMARK:
            self._upsert(event.object)
        self.resource_version = event.resource_version or self.resource_version

    def _upsert(self, obj: Obj) -> None:
        key = object_key(obj)
        cached = self._cache.get(key)
        if cached is not None and _resource_version(cached) == _resource_version(obj):
            return
        if cached is not None and _uid(cached) != _uid(obj):
            self._remove(key, cached)
            cached = None
        self._cache[key] = obj
        self._on_event(DeltaType.ADDED if cached is None else DeltaType.MODIFIED, obj)

    def _remove(self, key: str, final: Obj) -> None:
        if self._cache.pop(key, None) is not None:
            self._on_event(DeltaType.DELETED, final)
