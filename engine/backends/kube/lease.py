"""Leader election on a ``coordination.k8s.io/v1`` Lease, so that one usher controller acts at a time.

Standbys keep their caches warm; only the holder of the Lease (default
``usher-system/usher-controller``) binds, evicts and writes. The protocol is client-go's
leaderelection, written afresh:

- The Lease's spec records ``holderIdentity``, ``leaseDurationSeconds``, ``acquireTime``,
  ``renewTime`` (MicroTime, ``2006-01-02T15:04:05.000000Z``) and ``leaseTransitions``. It is
  created if absent; every other write is a PUT carrying the resourceVersion last read, so two
  candidates can never both win a round (the loser gets 409 and reads again).
- Expiry is judged by this process's own clock: the lease counts as held until
  ``leaseDurationSeconds`` after the moment this process last saw its spec change. The
  timestamps written in it are for people; clocks that disagree between machines do not matter.
- A candidate tries every ``retry_period`` (with jitter). The leader renews every
  ``retry_period``; if no renewal has succeeded ``renew_deadline`` after the last one, it steps
  down (``renew_deadline`` < ``lease_duration``, so it stops acting before anyone may take over),
  then campaigns again as a standby.
- :meth:`LeaderElector.release` steps down and writes an empty holder, so a standby takes over
  at its next try instead of waiting for the lease to expire.

The leader's state is :attr:`LeaderElector.is_leader`, :meth:`LeaderElector.wait` and an optional
``on_change(is_leader)`` callback, called before anything else happens after a change (in
particular, before the lease is handed back on release).
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import socket
import time
import uuid
from collections.abc import Callable
from datetime import datetime

from .client import LEASES, KubeClient, KubeError, NotFound, Obj, format_micro_time, utcnow

log = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "usher-system"
DEFAULT_NAME = "usher-controller"
JITTER = 1.2
"""A candidate waits between 1 and this many retry periods between tries."""


def default_identity() -> str:
    """``hostname_random``: unique per process, and says where the leader runs."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


class LeaderElector:
    """Campaign for a Lease and keep it while renewals succeed.

    ``renew_deadline`` and ``retry_period`` default to 2/3 and 2/15 of ``lease_duration``
    (client-go's 15 s / 10 s / 2 s). ``clock`` (seconds, monotonic) judges expiry and deadlines;
    ``wall_clock`` stamps what is written. Both are injectable for tests.
    """

    def __init__(
        self,
        client: KubeClient,
        namespace: str = DEFAULT_NAMESPACE,
        name: str = DEFAULT_NAME,
        identity: str | None = None,
        *,
        lease_duration: float = 15.0,
        renew_deadline: float | None = None,
        retry_period: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = utcnow,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.identity = identity or default_identity()
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline if renew_deadline is not None else lease_duration * 2 / 3
        self.retry_period = retry_period if retry_period is not None else lease_duration * 2 / 15
        if not lease_duration > self.renew_deadline > self.retry_period * JITTER > 0:
            raise ValueError(
                "leader election needs lease_duration > renew_deadline > "
                f"{JITTER} * retry_period > 0"
            )
        self._client = client
        self._clock = clock
        self._wall_clock = wall_clock
        self._on_change = on_change
        self._path = LEASES.path(namespace, name)
        self._lease: Obj | None = None
        self._observed_spec: Obj | None = None
        self._observed_at = 0.0
        self._renewed_at = -math.inf
        self._leading = asyncio.Event()
        self._following = asyncio.Event()
        self._following.set()
        self._task: asyncio.Task[None] | None = None

    @property
    def is_leader(self) -> bool:
        return self._leading.is_set()

    def holds(self) -> bool:
        """Leading, and the last successful renewal is recent enough that no standby can have
        taken the lease over: what a write that must come from the leader alone checks first."""
        return self.is_leader and self._clock() < self._renewed_at + self.renew_deadline

    async def wait(self, leader: bool = True) -> None:
        """Return once this process leads (or, with ``leader=False``, once it does not)."""
        await (self._leading if leader else self._following).wait()

    async def run(self) -> None:
        """Campaign, lead while renewals succeed, campaign again after losing; until released."""
        self._task = asyncio.current_task()
        while True:
            await self._acquire()
            self._set_leader(True)
            await self._keep()
            self._set_leader(False)

    async def release(self) -> None:
        """Stop campaigning; if leading, step down and hand the lease back."""
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
            await asyncio.wait([self._task])
        if not self.is_leader:
            return
        self._set_leader(False)
        try:
            async with asyncio.timeout(self.renew_deadline):  # not wait_for: see controller.run
                await self._hand_back()
        except (KubeError, TimeoutError) as exc:
            log.warning("could not release lease %s (%s); a standby takes over when it expires", self._path, exc)

    async def _acquire(self) -> None:
        while not await self._try():
            await asyncio.sleep(self.retry_period * random.uniform(1.0, JITTER))

    async def _keep(self) -> None:
        """Renew every retry period; return once no renewal succeeded within the renew deadline."""
        renewed_at = self._clock()
        while True:
            await asyncio.sleep(self.retry_period)
            try:
                async with asyncio.timeout(renewed_at + self.renew_deadline - self._clock()):
                    await self._renew()
            except TimeoutError:
                log.warning("%s could not renew lease %s in time; stepping down", self.identity, self._path)
                return
            renewed_at = self._clock()

    async def _renew(self) -> None:
        while not await self._try():
            await asyncio.sleep(self.retry_period)

    async def _try(self) -> bool:
        """One round of acquire-or-renew: True if this process holds the lease now."""
        try:
            if self.is_leader and self._lease is not None:
                try:
                    sent = self._clock()
                    return self._wrote(await self._client.replace(self._path, self._claimed(self._lease)), sent)
                except KubeError as exc:
                    log.info("renewing lease %s without reading it failed (%s); reading it", self._path, exc)
            return await self._read_and_claim()
        except KubeError as exc:
            log.info("%s: lease %s not acquired: %s", self.identity, self._path, exc)
            return False

    async def _read_and_claim(self) -> bool:
        try:
            lease = await self._client.get(self._path)
        except NotFound:
            if self._held_by_other({"spec": self._observed_spec or {}}):
                # deleted by hand while another replica led: it may still take itself for the
                # leader until its lease would have run out, so wait for that before creating one
                return False
            sent = self._clock()
            return self._wrote(await self._client.create(LEASES.path(self.namespace), self._new_lease()), sent)
        self._lease = lease
        self._observe(lease)
        if self._held_by_other(lease):
            return False
        sent = self._clock()
        return self._wrote(await self._client.replace(self._path, self._claimed(lease)), sent)

    def _wrote(self, lease: Obj, sent: float) -> bool:
        """A write of the lease succeeded; it counts from when it was *sent* (an answer that comes
        late must not stretch the time this process takes itself for the leader)."""
        self._lease = lease
        self._renewed_at = sent
        self._observe(lease)
        return True

    def _observe(self, lease: Obj) -> None:
        """Note when the lease's spec was last seen to change, by this process's clock."""
        spec = lease.get("spec") or {}
        if spec != self._observed_spec:
            self._observed_spec = spec
            self._observed_at = self._clock()

    def _held_by_other(self, lease: Obj) -> bool:
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        if not holder or holder == self.identity:
            return False
        duration = spec.get("leaseDurationSeconds") or self.lease_duration
        return self._clock() < self._observed_at + duration

    @property
    def _duration_seconds(self) -> int:
        return max(1, math.ceil(self.lease_duration))

    def _new_lease(self) -> Obj:
        now = format_micro_time(self._wall_clock())
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self._duration_seconds,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }

    def _claimed(self, lease: Obj) -> Obj:
        """The lease renewed by this process, or taken over (a new transition) from another."""
        spec = lease.get("spec") or {}
        now = format_micro_time(self._wall_clock())
        ours = spec.get("holderIdentity") == self.identity
        claimed = {
            **spec,
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self._duration_seconds,
            "acquireTime": spec.get("acquireTime", now) if ours else now,
            "renewTime": now,
            "leaseTransitions": int(spec.get("leaseTransitions") or 0) + (0 if ours else 1),
        }
        return {**lease, "spec": claimed}

    async def _hand_back(self) -> None:
        """Write an empty holder (if the lease is still ours) so a standby need not wait."""
        lease = await self._client.get(self._path)
        spec = lease.get("spec") or {}
        if spec.get("holderIdentity") != self.identity:
            return
        now = format_micro_time(self._wall_clock())
        released = {**spec, "holderIdentity": "", "leaseDurationSeconds": 1, "acquireTime": now, "renewTime": now}
        await self._client.replace(self._path, {**lease, "spec": released})

    def _set_leader(self, leader: bool) -> None:
        if leader == self.is_leader:
            return
        (self._leading if leader else self._following).set()
        (self._following if leader else self._leading).clear()
        log.info("%s %s lease %s", self.identity, "holds" if leader else "gave up", self._path)
        if self._on_change is not None:
            self._on_change(leader)
