"""The evictor: preemption and teardown evictions, held to PodDisruptionBudgets.

Evictions go through the policy/v1 Eviction API, so a PodDisruptionBudget can refuse them. Before
a cycle's preemption or move evicts anything, every victim is asked about with a dry run
(``evictions_allowed``) and the victims under one budget are counted together (``over_budget``:
a dry run judges one pod at a time), so that a preemption a budget would stop halfway stops
before it starts. Each pod evicted is registered in ``Departures`` until it is seen gone: binds
onto its node wait for it (``Binder.prebind``). The teardown (``teardown.py``) evicts through
``evict`` too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from ...admission import Decision
from ...state import ClusterState
from .client import DisruptionBudgetBlocked, NotSent
from .context import EVICTION_REFUSED_BACKOFF, Context, EventReason, nodes_of, pod_ref
from .gang import Gang, GangPhase
from .metrics import ErrorKind
from .objects import PodView, key_of, selector_matches
from .status import StatusWriter

log = logging.getLogger("usher.controller")

#: what ``evict`` says of an eviction a PodDisruptionBudget refused
BUDGET_REFUSED = "refused by a PodDisruptionBudget"


def why_evicted(state: ClusterState, d: Decision) -> str:
    """Why a job's pods are evicted, as their Events say it."""
    room = state.kept_rooms.get(d.job.id)
    if room is not None:  # consolidation: it starts again where room is kept for it
        return f"moved to make room for {d.by}: usher binds its pods again on {nodes_of(state, room.placements)} when they come back"
    why = f"{d.reason}" + (f" for {d.by}" if d.by else "")
    if not d.job.comes_back:
        why += (
            "; nothing will make its pods anew (a bare pod, or a batch Job that counts them as failed and ends: "
            "a podFailurePolicy rule with action Ignore on DisruptionTarget keeps a preempted Job going)"
        )
    return why


class Evictor:
    """Evictions and budgets; ``pod_object`` gives a pod as usher's watch last saw it."""

    def __init__(self, ctx: Context, status: StatusWriter, pod_object: Callable[[str], dict[str, Any] | None]) -> None:
        self.ctx = ctx
        self.status = status
        self.pod_object = pod_object
        #: PodDisruptionBudgets by namespace/name, as the informer last saw them
        self.budgets: dict[str, dict[str, Any]] = {}

    def budget_changed(self, obj: dict[str, Any], deleted: bool) -> None:
        if deleted:
            self.budgets.pop(key_of(obj), None)
        else:
            self.budgets[key_of(obj)] = obj

    async def evictions_allowed(self, evictions: list[Decision], now: float) -> bool:
        """Ask the API server, without evicting anything (``dryRun=All``), whether every pod the
        decisions evict may go now, so that a preemption or a move that a PodDisruptionBudget
        would stop halfway stops before it starts. A gang with a pod that may not go is spared
        for a while (``Mirror.spare``) and that pod gets an EvictionBlocked Event. True when all
        may go. A check that fails otherwise (an admission webhook, a pod under two budgets, which
        the API server answers 500, an API server away) counts as a refusal too: evicting the
        other victims would lose their work for a preemption that cannot finish."""
        mirror = self.ctx.mirror
        checks = [
            (gang, view, d)
            for d in evictions
            if (gang := mirror.gang_of_job.get(d.job.id)) is not None
            for view in gang.bound()
            if not view.terminating
        ]
        refusals = list(await asyncio.gather(*(self.eviction_refusal(v) for _, v, _ in checks)))
        if not any(refusals):
            refusals = self.over_budget([view for _, view, _ in checks])
        refused = False
        for (gang, view, d), why in zip(checks, refusals):
            if why is None:
                continue
            refused = True
            self.ctx.stats.evictions_blocked += 1
            mirror.spare(gang, now + EVICTION_REFUSED_BACKOFF)
            log.warning("eviction of %s would be refused: %s", view.key, why)
            await self.status.event(pod_ref(view), EventReason.EVICTION_BLOCKED,
                                    f"usher did not evict this pod ({why_evicted(mirror.state, d)}): {why}", warning=True)
        return not refused

    async def eviction_refusal(self, view: PodView) -> str | None:
        """Why the API server would not evict the pod now (a dry run), or None when it would
        (or the pod is gone already)."""
        if not self.ctx.may_write():
            return None
        try:
            await self.ctx.client.evict(view.namespace, view.name, view.uid, dry_run=True)
        except DisruptionBudgetBlocked as exc:
            return str(exc)
        except Exception as exc:  # noqa: BLE001 - any failure: the eviction would not go either
            return f"the eviction check failed: {exc}"
        return None

    def over_budget(self, views: list[PodView]) -> list[str | None]:
        """For pods to be evicted together: why each may not go, by the PodDisruptionBudgets the
        informer holds (None: it may). A dry run asks about one pod at a time, so N pods under one
        budget that allows fewer than N all pass it; the evictions would then stop halfway. A
        budget's ``status.disruptionsAllowed`` is what the eviction API checks and lowers."""
        under: dict[str, list[int]] = {}
        for i, view in enumerate(views):
            pod = self.pod_object(view.key) or {}
            if not _ready(pod):
                continue  # a pod not Ready takes nothing from a budget (the dry run judged it)
            labels = (pod.get("metadata") or {}).get("labels") or {}
            for key, pdb in self.budgets.items():
                if key.partition("/")[0] == view.namespace and selector_matches((pdb.get("spec") or {}).get("selector"), labels):
                    under.setdefault(key, []).append(i)
        out: list[str | None] = [None] * len(views)
        for key, members in under.items():
            try:
                allowed = int((self.budgets[key].get("status") or {}).get("disruptionsAllowed") or 0)
            except (TypeError, ValueError):
                allowed = 0
            if len(members) > allowed:
                for i in members:
                    out[i] = (
                        f"{len(members)} pods to evict together fall under PodDisruptionBudget {key}, "
                        f"which allows {allowed} disruption(s) now"
                    )
        return out

    async def evict_gang(self, gang: Gang | None, why: str, reason: EventReason = EventReason.PREEMPTED,
                         by_operator: bool = False) -> list[str]:
        """Evict every bound pod of a gang; what kept any of them (a PodDisruptionBudget, an
        error), empty when all went. Once one pod went, the teardown evicts the rest later."""
        if gang is None:
            return []
        mirror = self.ctx.mirror
        pods = [v for v in gang.bound() if not v.terminating]
        for v in gang.bound():
            if v.terminating:
                # on its way out already (deleted by someone else, evicted before a failover): it
                # holds its GPUs through its grace period, so binds onto its node wait for it too
                self.ctx.departures.expect(v)
        before = gang.phase
        mirror.tear_down(gang, why)
        # out of the engine's queue until its pods are gone: a later pass of this cycle must not
        # admit it again onto pods that are being deleted
        mirror.sync(gang, self.ctx.clock())
        failures = [f for f in await asyncio.gather(*(self.evict(v, why, reason, by_operator) for v in pods)) if f]
        if pods and len(failures) == len(pods):
            # nothing was evicted: the gang is still whole and running (a bind task in flight
            # goes on in the step it was in)
            mirror.stop_tearing_down(gang, before if before in (GangPhase.RESERVED, GangPhase.BINDS_SENT) else GangPhase.BINDS_SENT)
            mirror.sync(gang, self.ctx.clock())
        return failures

    async def evict(self, view: PodView, why: str, reason: EventReason, by_operator: bool = False) -> str | None:
        """Evict one pod (None when it is evicted or already gone), or say what prevented it.
        ``by_operator``: an operator's command (drain, preempt), which any replica or console may
        carry out (the API server checks the operator's permission); usher's own decisions are
        the leader's alone."""
        ctx = self.ctx
        key = view.key
        if not by_operator and not ctx.may_write():
            return f"{view.name}: this replica no longer holds the leader lease"
        ctx.departures.expect(view)
        try:
            if not await ctx.client.evict(view.namespace, view.name, view.uid, may_send=None if by_operator else ctx.may_write):
                ctx.departures.gone(view.uid)  # already gone
        except NotSent:
            ctx.departures.gone(view.uid)
            return f"{view.name}: this replica no longer holds the leader lease"
        except DisruptionBudgetBlocked as exc:
            ctx.departures.gone(view.uid)
            ctx.stats.evictions_blocked += 1
            log.warning("eviction of %s refused: %s", key, exc)
            await self.status.event(pod_ref(view), EventReason.EVICTION_BLOCKED, f"usher could not evict this pod ({why}): {exc}",
                                    warning=True)
            return f"{view.name}: {BUDGET_REFUSED} ({exc})"
        except Exception as exc:  # noqa: BLE001 - retried by the teardown on a later tick
            ctx.departures.gone(view.uid)
            ctx.metrics.controller_error(ErrorKind.EVICTION)
            log.warning("eviction of %s failed: %s", key, exc)
            await self.status.event(pod_ref(view), EventReason.EVICTION_BLOCKED, f"usher could not evict this pod ({why}): {exc}",
                                    warning=True)
            return f"{view.name}: {exc}"
        ctx.stats.evictions += 1
        await self.status.event(pod_ref(view), reason, f"Evicted by usher: {why}", warning=True)
        return None


def _ready(pod: dict[str, Any]) -> bool:
    """Running and Ready: a pod whose eviction a PodDisruptionBudget counts against it."""
    status = pod.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if isinstance(c, dict) and c.get("type") == "Ready"), None)
    return status.get("phase") == "Running" and ready is not None and ready.get("status") == "True"
