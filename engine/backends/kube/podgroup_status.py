"""The status usher writes on a runtime PodGroup of the Workload API (1.36 ``v1alpha2``, 1.37 ``v1beta1``).

A PodGroup's scheduler reports on it with one condition: ``PodGroupScheduled`` in 1.36,
``PodGroupInitiallyScheduled`` in 1.37 (the type follows the version of the object usher read).
``False`` with reason ``Unschedulable`` while the gang waits, its message usher's own reason and
sentence (what ``kubectl describe pod`` shows on the pods' ``PodScheduled`` condition); ``True``
with reason ``Scheduled`` once ``minCount`` of its pods are bound. 1.37's condition is terminal
once ``True`` (it never goes back, even when pods are evicted later), so usher never writes it
``False`` again; 1.36's follows the gang.

Writes are a JSON merge patch of ``status.conditions`` on the ``status`` subresource, keeping the
conditions of other writers (``DisruptionTarget``) as the cached object has them, and are skipped
when the object already says the same (or said it with other figures less than
``MESSAGE_REFRESH`` ago), so a waiting gang does not rewrite its PodGroup every round.

It is called by ``status.StatusWriter`` each status round with the gangs and why each waits.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .client import NotFound, NotSent
from .client.values import format_time, utcnow
from .context import Context
from .gang import Gang
from .metrics import ErrorKind
from .owner_workload import GROUP, POD_GROUP_PLURAL, SCHEDULING_GROUP_KIND

log = logging.getLogger("usher.controller")

#: how stale a waiting message that differs only in its figures may get
MESSAGE_REFRESH = 60.0


class ConditionType(StrEnum):
    SCHEDULED = "PodGroupScheduled"
    """1.36 (``v1alpha2``)."""
    INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"
    """1.37 (``v1beta1``): terminal once True."""


class Reason(StrEnum):
    UNSCHEDULABLE = "Unschedulable"
    SCHEDULED = "Scheduled"


CONDITION_OF_VERSION: dict[str, ConditionType] = {"v1alpha2": ConditionType.SCHEDULED, "v1beta1": ConditionType.INITIALLY_SCHEDULED}

#: (``OwnerResource.key``, namespace, name) -> (the apiVersion it is served in, the cached
#: PodGroup), or None
OwnerLookup = Callable[[str, str, str], tuple[str, dict[str, Any]] | None]
#: the cache key of the PodGroups (``owners.SCHEDULING_POD_GROUPS``)
POD_GROUP_KEY = f"{GROUP}/{SCHEDULING_GROUP_KIND}"


@dataclass(frozen=True, slots=True)
class Wanted:
    """The condition a PodGroup should carry."""

    status: bool
    reason: Reason
    message: str


def pod_group_of(gang_key: str) -> tuple[str, str] | None:
    """(namespace, PodGroup name) of a gang made from a PodGroup, else None."""
    namespace, kind, name = (gang_key.split("/", 2) + ["", ""])[:3]
    return (namespace, name) if kind == SCHEDULING_GROUP_KIND and name else None


def wanted(gang: Gang, waiting: tuple[str, str] | None) -> Wanted | None:
    """What the gang's PodGroup should say: placed once ``minCount`` pods are bound, else why it
    waits (``waiting``: usher's reason and sentence); None when there is nothing to say yet."""
    bound = len(gang.bound())
    if gang.size is not None and bound >= gang.size:
        return Wanted(True, Reason.SCHEDULED, f"{bound} pods of the group are bound (minCount {gang.size})")
    if waiting is None:
        return None
    reason, message = waiting
    return Wanted(False, Reason.UNSCHEDULABLE, f"{reason}: {message}")


def _same_but_numbers(a: str, b: str) -> bool:
    return re.sub(r"\d+(\.\d+)?", "#", a) == re.sub(r"\d+(\.\d+)?", "#", b)


class PodGroupStatusWriter:
    """Writes each PodGroup gang's condition; remembers when it last wrote one."""

    def __init__(self, ctx: Context, lookup: OwnerLookup | None) -> None:
        self.ctx = ctx
        self.lookup = lookup
        self._written: dict[tuple[str, str], float] = {}

    async def write(self, gangs: Iterable[Gang], waiting: Mapping[str, tuple[str, str]]) -> None:
        """Bring the condition of every PodGroup that is a gang up to date (``waiting``: gang key
        to usher's reason and sentence, for the gangs that wait)."""
        if self.lookup is None:
            return
        for gang in list(gangs):
            where = pod_group_of(gang.key)
            if where is None:
                continue
            want = wanted(gang, waiting.get(gang.key))
            found = self.lookup(POD_GROUP_KEY, *where)
            if want is None or found is None:
                continue
            await self._write_one(found[0].rpartition("/")[2], found[1], want)

    async def _write_one(self, version: str, obj: dict[str, Any], want: Wanted) -> None:
        ctx = self.ctx
        meta = obj.get("metadata") or {}
        ctype = CONDITION_OF_VERSION.get(version)
        if ctype is None or not ctx.may_write():
            return
        conditions = [c for c in (obj.get("status") or {}).get("conditions") or [] if isinstance(c, dict)]
        current = next((c for c in conditions if c.get("type") == ctype), None)
        status = "True" if want.status else "False"
        if current is not None:
            if ctype is ConditionType.INITIALLY_SCHEDULED and current.get("status") == "True":
                return  # terminal in 1.37
            if current.get("status") == status and current.get("reason") == want.reason:
                said = str(current.get("message") or "")
                last = self._written.get((meta.get("namespace", ""), meta.get("name", "")))
                if said == want.message or (
                    last is not None and ctx.clock() - last < MESSAGE_REFRESH and _same_but_numbers(said, want.message)
                ):
                    return
        changed = current is None or current.get("status") != status
        condition = {
            "type": str(ctype), "status": status, "reason": str(want.reason), "message": want.message,
            "lastTransitionTime": format_time(utcnow()) if changed else current.get("lastTransitionTime"),
            "observedGeneration": int(meta.get("generation") or 0),
        }
        others = [c for c in conditions if c.get("type") != ctype]
        path = f"/apis/{GROUP}/{version}/namespaces/{meta.get('namespace')}/{POD_GROUP_PLURAL}/{meta.get('name')}/status"
        try:
            await ctx.client.patch(path, {"status": {"conditions": [*others, condition]}}, may_send=ctx.may_write)
        except Exception as exc:  # noqa: BLE001 - written again on the next round
            if not isinstance(exc, (NotFound, NotSent)):
                ctx.metrics.controller_error(ErrorKind.STATUS_WRITE)
                log.warning("could not update the status of PodGroup %s/%s: %s", meta.get("namespace"), meta.get("name"), exc)
            return
        self._written[(meta.get("namespace", ""), meta.get("name", ""))] = ctx.clock()
