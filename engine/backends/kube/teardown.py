"""The teardown: a gang that is not whole any more is stopped whole, or completed.

Each tick the leader evicts what is left of every gang being torn down (TEARDOWN: a lost member,
a rollback, an eviction that failed before), so no gang stays half-running; an eviction that
fails is asked again after a wait that doubles (``EVICTION_RETRY``..``EVICTION_RETRY_MAX``). A
gang found partly bound with no bind of ours under way (a leader died between its binds) is torn
down too. Where a PodDisruptionBudget refuses every eviction, the gang is completed instead
(COMPLETING): the pods it lacks are placed beside those kept running (``Engine.complete``) and
bound by ``Binder.complete``.
"""

from __future__ import annotations

import logging
import math

from ...fmt import plural
from .binder import Binder
from .context import EVICTION_RETRY_MAX, Context, EventReason, doubled_wait
from .evictor import BUDGET_REFUSED, Evictor
from .gang import Gang, GangPhase

log = logging.getLogger("usher.controller")


class Teardown:
    """The teardown pass of each tick (the leader's)."""

    def __init__(self, ctx: Context, evictor: Evictor, binder: Binder) -> None:
        self.ctx = ctx
        self.evictor = evictor
        self.binder = binder
        #: when a teardown may next ask to evict each pod (monotonic seconds), and the wait it
        #: left before that try, by uid
        self._evict_tried: dict[str, tuple[float, float]] = {}

    def forget(self, uid: str) -> None:
        """The pod ``uid`` was deleted: its eviction is not tried again."""
        self._evict_tried.pop(uid, None)

    def next_wait(self, last: float | None) -> float:
        """The teardown's wait before its next try: ``eviction_retry``, doubled after each try
        up to ``EVICTION_RETRY_MAX``."""
        return doubled_wait(last or 0.0, self.ctx.eviction_retry, EVICTION_RETRY_MAX)

    async def run(self) -> None:
        """Evict what is left of every gang being torn down (a lost member, a rollback, an
        eviction that failed before), so no gang stays half-running."""
        ctx, mirror = self.ctx, self.ctx.mirror
        for gang in mirror.half_bound():
            # not ours to finish (we are not binding it): a leader before us died between its binds
            mirror.move(gang, GangPhase.COMPLETING, f"found partly bound: {len(gang.bound())} of its {gang.required} pods on nodes")
            mirror.sync(gang, ctx.clock())
        now = ctx.monotonic()
        for gang in mirror.teardowns():
            if gang.to_bind and now >= gang.complete_at[0]:
                wait = self.next_wait(gang.complete_at[1] or None)
                gang.complete_at = (now + wait, wait)
                if await self.binder.complete(gang):
                    continue
            pods = [
                v
                for v in gang.bound()
                if not v.terminating
                and not ctx.departures.awaited(v.uid)
                and now >= self._evict_tried.get(v.uid, (-math.inf, 0.0))[0]
            ]
            if pods:
                log.info("teardown %s (%s): evicting %s", gang.key, gang.teardown, ", ".join(v.name for v in pods))
            refused = 0
            for view in pods:
                tried = self._evict_tried.get(view.uid)
                wait = self.next_wait(tried[1] if tried is not None else None)
                self._evict_tried[view.uid] = (now + wait, wait)
                failure = await self.evictor.evict(view, f"gang {gang.title or gang.key} is being stopped: {gang.teardown}",
                                                   EventReason.GANG_BROKEN)
                refused += failure is not None and BUDGET_REFUSED in failure
            if gang.to_bind or not pods or not refused == len(pods) == len(gang.bound()):
                continue  # not every pod on a node is kept there by a budget
            if not gang.completable and gang.unbound() and gang.phase in (GangPhase.TEARDOWN, GangPhase.UNRESERVING):
                # a member lost and the rest kept by a budget (one that allows no disruption with
                # a pod missing): the pods its owner made anew stand in for the lost ones
                # (``plan_completion`` takes them in)
                mirror.move(gang, GangPhase.COMPLETING, f"lost a member, and a PodDisruptionBudget keeps the other {plural(len(pods), 'pod')}")
            if gang.completable:
                self.plan_completion(gang)

    def plan_completion(self, gang: Gang) -> None:
        """Every eviction of a gang short of pods (found partly bound, or a member lost) was
        refused by a budget: place the pods it lacks beside those on nodes (``Engine.complete``),
        for ``Binder.complete`` to bind."""
        ctx, mirror = self.ctx, self.ctx.mirror
        job = gang.job
        if job is None or job.current_run is None:
            return
        short = min(gang.minimum or gang.required, gang.required) - len(gang.bound()) - len(gang.completed)
        missing = mirror.unplaced_members(gang)[:max(0, short)]  # an elastic gang: up to its minimum
        if len(missing) < short and len(gang.unbound()) > len(missing):
            # pods made since its job was taken in (a lost member's, made anew): take it in again with them
            why = gang.teardown
            if not mirror.take_in_again(gang, ctx.clock()) or gang.job is None:
                return  # whole as it is now: nothing to complete
            if why is not None and gang.phase == GangPhase.IDLE:
                mirror.move(gang, GangPhase.COMPLETING, why)
            job = gang.job
            missing = mirror.unplaced_members(gang)[:max(0, short)]
        if len(missing) < short:
            log.info("teardown %s refused by a PodDisruptionBudget; waiting for its owner to make the %s it lacks",
                     gang.key, plural(short - len(missing), "pod"))
            return  # binding fewer would leave it short all the same
        placements = mirror.engine.complete(job, missing, ctx.clock())
        if not placements:
            log.info("teardown %s refused by a PodDisruptionBudget; no room yet to complete it instead", gang.key)
            return
        gang.to_bind = {p.pod: (mirror.state.nodes[p.node_id].name, list(p.gpus)) for p in placements}
        gang.complete_at = (-math.inf, 0.0)
        log.info("teardown %s refused by a PodDisruptionBudget: completing it instead, %s", gang.key,
                 ", ".join(f"{pod} on {node}" for pod, (node, _) in sorted(gang.to_bind.items())))
        mirror.sync(gang, ctx.clock())
        ctx.wake.set()
