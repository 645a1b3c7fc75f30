"""The status writer: why each pod waits, where ``kubectl describe`` looks, and usher's Events.

A gang made from a Workload API PodGroup gets its condition on the PodGroup too (``podgroup_status``).

Pending pods get the ``PodScheduled=False`` condition with the engine's reason and one-sentence
message, and an Event when the reason changes. A message that differs only in its figures is
written again at most every ``MESSAGE_REFRESH`` seconds, and a round runs at most every
``STATUS_INTERVAL`` (the cycle driver starts it), so a large backlog does not flood the API
server. Every Event of the controller's parts goes through ``StatusWriter.event``, which keeps
Events to a share of the client's connections so binds keep the rest.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...enums import PendingReason
from ...explain import explain_all
from .client import ConditionStatus, EventType, NotFound, NotSent, ObjectRef
from .context import EVENT_SHARE, Context, EventReason, pod_ref
from .events import EventRecorder
from .metrics import ErrorKind
from .objects import PodView
from .podgroup_status import OwnerLookup, PodGroupStatusWriter

log = logging.getLogger("usher.controller")

#: how often pending pods' conditions are brought up to date, and how stale a message may get
STATUS_INTERVAL = 5.0
MESSAGE_REFRESH = 60.0
#: writes of one round in flight at most
STATUS_CONCURRENCY = 16

#: Engine reasons that mean "no node can take it now": more nodes would help, so the pod carries
#: reason ``Unschedulable``, the one Cluster Autoscaler and Karpenter act on. A pod that waits
#: for quota, approval, a hold or its gang keeps usher's own reason: buying nodes would not start it.
CAPACITY_REASONS = frozenset({
    PendingReason.INSUFFICIENT_CAPACITY,
    PendingReason.TOPOLOGY_UNSATISFIABLE,
    PendingReason.NO_MATCHING_NODES,
    PendingReason.RESERVED_FOR_HIGHER_PRIORITY,
})
UNSCHEDULABLE = "Unschedulable"

#: the Events that are the scheduler's decisions (what a console shows in its Events view)
DECISION_REASONS = frozenset({
    EventReason.SCHEDULED, EventReason.PREEMPTED, EventReason.GANG_ROLLBACK, EventReason.GANG_BROKEN, EventReason.EVICTION_BLOCKED,
})
#: Warning Events a console leaves out: a refused ConfigMap of usher's, which the console's own
#: controller reads and refuses too, and says so in its own trail (one line, not two)
OWN_CONFIG_REASONS = frozenset({EventReason.INVALID_QUEUE_CONFIG, EventReason.INVALID_OPERATOR_DECISIONS})


def pod_scheduled_condition(reason: PendingReason, message: str) -> tuple[str, str]:
    """The reason and message of a waiting pod's ``PodScheduled=False`` condition; the message
    always starts with usher's own reason."""
    return (UNSCHEDULABLE if reason in CAPACITY_REASONS else str(reason)), f"{reason}: {message}"


def shown_to_operators(event: dict[str, Any]) -> bool:
    """Whether a console's Events view shows one of usher's Events: the scheduler's decisions,
    and every Warning (why a pod waits, as its reason changes; a bind the kubelet refused; an
    eviction a budget blocked), as ``kubectl get events`` lists them."""
    reason = event.get("reason")
    if reason in DECISION_REASONS:
        return True
    return event.get("type") == EventType.WARNING and reason not in OWN_CONFIG_REASONS


@dataclass(slots=True)
class _Written:
    reason: str
    message: str
    at: float


class StatusWriter:
    """Pod conditions and Events; ``node_object`` gives a Node as usher's watch last saw it."""

    def __init__(
        self, ctx: Context, node_object: Callable[[str], dict[str, Any] | None], owner_object: OwnerLookup | None = None
    ) -> None:
        self.ctx = ctx
        self.node_object = node_object
        #: the Workload API's PodGroups that are gangs get their condition too (``podgroup_status``)
        self.pod_groups = PodGroupStatusWriter(ctx, owner_object)
        self.events = EventRecorder(ctx.client)
        self._event_slots = asyncio.Semaphore(max(1, int(ctx.client.pool_size * EVENT_SHARE)))
        self._written: dict[str, _Written] = {}

    def forget(self, key: str) -> None:
        """The pod ``key`` was deleted: nothing written for it is remembered."""
        self._written.pop(key, None)

    async def write_status(self) -> None:
        """Bring every waiting pod's PodScheduled condition (and Events) up to date."""
        ctx = self.ctx
        mirror = ctx.mirror
        ctx.busy += 1
        try:
            now = ctx.clock()
            explained = explain_all(mirror.state, now, mirror.engine.policy.borrowing)
            writes = []
            waiting: dict[str, tuple[str, str]] = {}
            for gang in mirror.waiting_gangs():
                reason, message = gang.reason, gang.message
                job = gang.job
                if reason is None and job is not None and job.id in explained:
                    ex = explained[job.id]
                    reason, message = ex.reason, ex.message
                if reason is None or message is None:
                    continue
                waiting[gang.key] = (str(reason), message)
                condition_reason, condition_message = pod_scheduled_condition(reason, message)
                for view in gang.unbound():
                    last = self._written.get(view.key)
                    current = view.conditions.get("PodScheduled")
                    same_reason = (last is not None and last.reason == reason) or (
                        current is not None and current[2].split(":", 1)[0] == reason
                    )
                    if same_reason and (
                        (current is not None and current[2] == condition_message)
                        or (last is not None and now - last.at < MESSAGE_REFRESH and _same_but_numbers(last.message, condition_message))
                    ):
                        continue
                    writes.append((view, reason, condition_reason, condition_message, message, same_reason))
            sem = asyncio.Semaphore(STATUS_CONCURRENCY)

            async def limited(write: tuple[PodView, PendingReason, str, str, str, bool]) -> None:
                # the write is started here, under the semaphore: a round cancelled meanwhile
                # (the controller stopping) leaves no write begun and never awaited
                async with sem:
                    await self._write_one(*write)

            await asyncio.gather(*(limited(w) for w in writes))
            await self.pod_groups.write(mirror.gangs.values(), waiting)
        finally:
            ctx.busy -= 1

    async def _write_one(
        self, view: PodView, reason: PendingReason, condition_reason: str, message: str, event_message: str, same_reason: bool
    ) -> None:
        ctx = self.ctx
        if not ctx.may_write():
            return
        try:
            await ctx.client.patch_pod_condition(view.namespace, view.name, "PodScheduled", ConditionStatus.FALSE, condition_reason,
                                                 message, may_send=ctx.may_write)
        except Exception as exc:  # noqa: BLE001 - written again on the next round
            if not isinstance(exc, (NotFound, NotSent)):
                ctx.metrics.controller_error(ErrorKind.STATUS_WRITE)
                log.warning("could not update the condition of %s: %s", view.key, exc)
            return
        self._written[view.key] = _Written(str(reason), message, ctx.clock())
        ctx.stats.status_writes += 1
        if not same_reason:
            await self.event(pod_ref(view), str(reason), event_message, warning=True)

    def node_ref(self, name: str) -> ObjectRef:
        """An Event's reference to Node ``name``: with its uid as usher's watch last saw it, else
        with the node's name for a uid (the kubelet's own convention; ``kubectl describe node``
        looks for both)."""
        obj = self.node_object(name)
        return ObjectRef.to(obj, "Node") if obj is not None else ObjectRef("Node", name, uid=name)

    async def event(self, ref: ObjectRef, reason: str, message: str, warning: bool = False) -> None:
        """Record an Event (best effort); a share of the client's connections at most."""
        try:
            async with self._event_slots:
                await self.events.record(ref, reason, message, EventType.WARNING if warning else EventType.NORMAL)
        except Exception as exc:  # noqa: BLE001 - an Event is best effort
            self.ctx.metrics.controller_error(ErrorKind.EVENT)
            log.warning("could not record an Event on %s %s: %s", ref.kind, ref.name, exc)


def _same_but_numbers(a: str, b: str) -> bool:
    """Whether two messages say the same thing with other figures (such an update can wait for
    ``MESSAGE_REFRESH``; one that says something else cannot)."""
    return re.sub(r"\d+(\.\d+)?", "#", a) == re.sub(r"\d+(\.\d+)?", "#", b)
