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

Outages and restarts of the API server:

- a watch from a resourceVersion the server has not reached (it restarted on a wiped etcd, so
  its resourceVersions started again from low numbers) is answered ``504 Too large resource
  version``: the informer lists again (after the backoff), so objects of the old world are
  DELETED and those of the new one ADDED; an object under a known name with a new uid is a new
  object even if its resourceVersion happens to equal the cached one's;
- after an outage longer than ``relist_after`` (disconnected that long) the old
  resourceVersion is not trusted: the informer lists again instead of resuming (a wiped store
  may already have passed it, and the server's watch history is short anyway);
- a stream that stalls (open but silent) is ended by the client's read timeout, a little past
  ``timeoutSeconds``, and counts as a failure.

Connection health, for the console and readiness: :attr:`Informer.connected` is true from a
successful list, an accepted watch or an event until an attempt fails (or the server says the
cache must be rebuilt); :attr:`Informer.last_contact` is the ``clock`` time the cache was last
known current (a list, an accepted watch, an event, a stream ended in good order);
:attr:`Informer.disconnected_since` when the informer found it had lost contact (None while
connected; its creation until it first connects), and :meth:`Informer.since_disconnected` how
long ago that was. A stream that stalls counts as connected until the read timeout says
otherwise: nothing can tell a quiet stream from a dead one sooner.
:func:`usher.engine.backends.kube.connection.connection_of` sums these up over informers.

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
    ApiError,
    Backoff,
    Gone,
    KubeClient,
    Forbidden,
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


RELIST_AFTER = 30.0
"""Seconds without an answer from the server after which the informer lists again rather than
resuming from its resourceVersion (kube-apiserver keeps at least 75 s of watch history)."""


def is_too_large(error: KubeError) -> bool:
    """The server has not reached the resourceVersion asked for (504 ResourceVersionTooLarge)."""
    if not isinstance(error, ApiError) or error.code != 504:
        return False
    if any(cause.get("reason") == "ResourceVersionTooLarge" for cause in error.causes):
        return True
    return "too large resource version" in error.message.lower()


class Informer:
    """List-then-watch one collection, keep a cache and report every change to ``on_event``.

    ``optional`` is for resources the cluster may not serve (a CRD that is not installed): a 404
    on the list counts as an empty list (so the informer still syncs) and is asked again later.
    ``watch_timeout`` is the server-side length of one watch, randomised up to twice as long.
    ``sleep`` is how the informer waits between attempts (injectable, so tests see the pauses).
    ``clock`` (wall time by default) stamps :attr:`last_contact` and :attr:`disconnected_since`;
    ``relist_after`` is how long disconnected makes it list again rather than resume.
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
        clock: Callable[[], float] = time.time,
        relist_after: float = RELIST_AFTER,
    ) -> None:
        self.path = path
        #: called for each list or watch that failed (the controller counts them:
        #: ``usher_controller_errors_total{kind="watch"}``)
        self.on_error: Callable[[], None] | None = None
        self.has_synced = asyncio.Event()
        #: whether the server serves the collection (and lets us list it): None until the first
        #: list; an ``optional`` one answered 404 or 403 is False, and asked again later
        self.served: bool | None = None
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
        self._clock = clock
        self._relist_after = relist_after
        self.connected = False
        """Whether the cache is being kept current: a list or watch succeeded and no attempt has
        failed since."""
        self.last_contact = clock()
        """When the cache was last known current (``clock`` time); the informer's creation until then."""
        self.disconnected_since: float | None = self.last_contact
        """When contact was found lost (``clock`` time); None while connected."""
        self._cache: dict[str, Obj] = {}
        self._quiet = 0
        self._task: asyncio.Task[None] | None = None

    @property
    def cache(self) -> Mapping[str, Obj]:
        """The objects as last seen, by key (read-only)."""
        return MappingProxyType(self._cache)

    def since_disconnected(self) -> float | None:
        """Seconds since contact was found lost; None while connected."""
        if self.connected or self.disconnected_since is None:
            return None
        return max(0.0, self._clock() - self.disconnected_since)

    def _contact(self) -> None:
        self.last_contact = self._clock()
        self.connected = True
        self.disconnected_since = None

    def _lose(self) -> None:
        if self.connected or self.disconnected_since is None:
            self.disconnected_since = self._clock()
        self.connected = False

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
        outage = self.since_disconnected()
        if self.resource_version and outage is not None and outage > self._relist_after:
            log.info(
                "%s: no contact with the API server for %.0fs; listing again rather than resuming from %s",
                self.path, outage, self.resource_version,
            )
            self.resource_version = ""
        try:
            if not self.resource_version and not await self._relist():
                return self._backoff.cap
            await self._watch()
        except Gone:
            log.info("%s: resourceVersion %s is too old; listing again", self.path, self.resource_version)
            self.resource_version = ""
        except KubeError as exc:
            if is_too_large(exc):
                # the server is behind the resourceVersion we hold: it lost its store (or this is
                # another server); what we cached may be of another world, so list it again
                log.warning("%s: %s; the API server's store was reset? listing again", self.path, exc)
                self.resource_version = ""
                self._lose()
                if self.on_error is not None:
                    self.on_error()
                return None
            self._lose()
            if self.on_error is not None:
                self.on_error()
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
        except (NotFound, Forbidden) as exc:
            if not self._optional:
                raise
            if self.served is not False:
                what = "is not served" if isinstance(exc, NotFound) else "may not be listed by this identity"
                log.info("%s %s; treating it as empty and asking again later", self.path, what)
            self.served = False
            self._replace([])
            self._contact()
            return False
        self.served = True
        self._replace(listed.items)
        self.resource_version = listed.resource_version
        self._contact()
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
            on_open=self._contact,
        )
        started = time.monotonic()
        async with aclosing(events):
            async for event in events:
                self._handle(event)
        self._contact()  # the server ended the stream in good order
        if time.monotonic() - started >= timeout / 2:
            self._quiet = 0  # a quiet stream that lasted its time is healthy too

    def _handle(self, event: WatchEvent) -> None:
        if event.type is not WatchEventType.BOOKMARK:
            self._quiet = 0  # a bookmark alone proves little: a stream that only bookmarks and drops still backs off
        self._contact()
        if event.type is WatchEventType.DELETED:
            self._remove(object_key(event.object), event.object)
        elif event.type is not WatchEventType.BOOKMARK:
            self._upsert(event.object)
        self.resource_version = event.resource_version or self.resource_version

    def _upsert(self, obj: Obj) -> None:
        key = object_key(obj)
        cached = self._cache.get(key)
        if cached is not None and _resource_version(cached) == _resource_version(obj) and _uid(cached) == _uid(obj):
            return
        if cached is not None and _uid(cached) != _uid(obj):
            self._remove(key, cached)
            cached = None
        self._cache[key] = obj
        self._on_event(DeltaType.ADDED if cached is None else DeltaType.MODIFIED, obj)

    def _remove(self, key: str, final: Obj) -> None:
        if self._cache.pop(key, None) is not None:
            self._on_event(DeltaType.DELETED, final)
