"""The binder: a decided gang from "reserved" to "bound", whole or not at all.

Per gang, kube-scheduler's bind steps, each a method here and a ``GangPhase``:

- ``reserve``: the engine's decision holds the gang's room (its run); the gang is RESERVED and
  can still be called off (``call_off``: preempted, held, a node cordoned) while it waits.
- PreBind: whatever must be true before a pod may start on its node, still RESERVED: the pods
  usher evicted from those nodes are gone (``prebind``: they hold their GPUs through their grace
  period, however long that takes), then every claim of the gang's pods is bound on its pod's
  node (``bind_volumes``, through ``volumes_prebind``). A step (device claims next) is a method
  that returns why the gang may not bind (or None), not a new flag.
- ``bind``: every pod bound, concurrently, over the client's kept-alive connections
  (BINDS_SENT: nothing calls them off, and the job is no victim until they end).
- ``unreserve``: any bind failed (a refusal, a transport error, a lost lease): the pods that did
  bind are evicted and the gang is torn down and requeued (UNRESERVING, then TEARDOWN), with a
  back-off that doubles while its binds keep failing.

``grow`` binds the pods an elastic gang grew by, after the same volume and device PreBind (one
that fails is given back; a volume or claims step that fails gives them all back, and the gang
backs off growing) and
``complete`` the pods a refused teardown binds instead (``teardown.py`` plans them).
"""

from __future__ import annotations

import asyncio
import logging
import math

from ...admission import Decision
from ...enums import PendingReason
from ...state import MILLI, Job, PodPlacement
from .client import ConditionStatus, NotSent
from .context import (
    BIND_CONCURRENCY,
    BIND_RETRY_MAX,
    EVENT_SHARE,
    Context,
    EventReason,
    doubled_wait,
    pod_ref,
)
from .dra.plan import ClaimPlan, Placed
from .dra_prebind import ClaimBinder
from .evictor import BUDGET_REFUSED, Evictor
from .gang import Gang, GangPhase
from .metrics import queued_since
from .objects import Annotation, PodView, natural_key
from .status import StatusWriter, pod_scheduled_condition
from .volumes import Blocker, VolumeReason
from .volumes_prebind import VolumeBinder

log = logging.getLogger("usher.controller")

#: how often a bind that waits for evicted pods to leave its nodes says it is still waiting
EVICTION_WAIT_LOG = 60.0

#: one pod to bind: the pod, its node, its GPUs
BindJob = tuple[PodView, str, list[int]]


class Binder:
    """Reserve, PreBind, Bind and Unreserve for each gang the cycle admits."""

    def __init__(self, ctx: Context, status: StatusWriter, evictor: Evictor) -> None:
        self.ctx = ctx
        self.status = status
        self.evictor = evictor
        pool = ctx.client.pool_size
        events = max(1, int(pool * EVENT_SHARE))
        self._bind_slots = asyncio.Semaphore(max(1, min(BIND_CONCURRENCY, pool - events)))
        #: PreBind's volume step: the gang's claims bound before any of its pods (``volumes_prebind``)
        self.volumes = VolumeBinder(ctx.client, ctx.mirror.volumes, self._labels, ctx.may_write, ctx.monotonic,
                                    storage_changed=ctx.storage_changed)
        #: PreBind's device step: the gang's ResourceClaims allocated and reserved (``dra_prebind``)
        self.claims = ClaimBinder(ctx.client, ctx.mirror.dra, ctx.may_write)
        #: per gang key, the claims its PreBind wrote, until its binds end (undone for pods not bound)
        self._claim_plans: dict[str, ClaimPlan] = {}
        #: whether this replica has taken over what a leader before it left (``lead``)
        self._took_over = False
        #: per gang key, set when the gang's bind task, still waiting for its room, is called
        #: off (``call_off``): the task stops waiting at once
        self._call_offs: dict[str, asyncio.Event] = {}

    # -- Reserve ------------------------------------------------------------------------------

    def reserve(self, gang: Gang, decision: Decision) -> None:
        """The cycle admitted ``gang`` (its run holds the room): its bind task starts."""
        self.ctx.mirror.move(gang, GangPhase.RESERVED)
        self._call_offs[gang.key] = asyncio.Event()
        self.ctx.spawn(self._bind_gang(gang, decision, self._call_offs[gang.key]))

    def call_off(self, gang: Gang, why: str) -> None:
        """The gang's reserved binds must not be sent (it was preempted while it waited for its
        room): its task stops waiting at once. Binds already sent are not called off."""
        if gang.phase == GangPhase.RESERVED:
            self.ctx.mirror.move(gang, GangPhase.CALLED_OFF, why)
        if (event := self._call_offs.get(gang.key)) is not None:
            event.set()

    async def _bind_gang(self, gang: Gang, decision: Decision, call_off: asyncio.Event) -> None:
        """Bind every pod of an admitted gang, or none: any failure (an API error, a transport
        error, a timeout, a lost lease) evicts those that bound and requeues the gang."""
        ctx, mirror = self.ctx, self.ctx.mirror
        ctx.busy += 1
        errors: list[str] = []
        jobs: list[BindJob] = []
        try:
            pairs = mirror.pods_of(gang, decision.placements)
            jobs = [(view, mirror.state.nodes[p.node_id].name, p.gpus) for view, p in pairs]
            nodes = {node for _, node, _ in jobs}
            if not await self.prebind(gang, nodes, call_off):
                errors.append("the wait for evicted pods to leave its nodes was cut short")
            elif not ctx.may_write():
                errors.append("this replica no longer holds the leader lease")
            elif gang.phase == GangPhase.RESERVED and (refused := await self.bind_volumes(gang, jobs, call_off)) is not None:
                # no pod was bound: the gang goes back to its queue, placed again as its claims are now
                if gang.phase == GangPhase.RESERVED:
                    mirror.move(gang, GangPhase.CALLED_OFF, refused)
                mirror.engine.unbind(decision.job, ctx.clock(), refused)
            elif gang.phase == GangPhase.RESERVED and (refused := await self.bind_claims(gang, jobs)) is not None:
                # no pod was bound and no claim is left allocated: placed again as its claims are now
                if gang.phase == GangPhase.RESERVED:
                    mirror.move(gang, GangPhase.CALLED_OFF, refused)
                mirror.engine.unbind(decision.job, ctx.clock(), refused)
            elif gang.phase == GangPhase.RESERVED and (withdrawn := self.withdrawn(gang, nodes)) is not None:
                # nothing sent yet: the job goes back to its queue, and is decided again as it is now
                mirror.move(gang, GangPhase.CALLED_OFF, withdrawn)
                mirror.engine.unbind(decision.job, ctx.clock(), withdrawn)
            elif gang.phase in (GangPhase.RESERVED, GangPhase.UNRESERVING):
                errors = await self.bind(gang, decision.job, jobs)
        except Exception as exc:  # whatever broke, the gang must not stay half-bound
            log.exception("binding gang %s failed", gang.key)
            errors.append(f"{type(exc).__name__}: {exc}")
        try:
            if gang.phase == GangPhase.CALLED_OFF:
                # preempted while it waited for its room: nothing was sent, nothing to undo; the
                # engine ended its run already, and the sync below queues its pods again
                log.info("bind %s called off before any was sent: %s", gang.key, gang.called_off)
            elif errors:
                ctx.stats.binds += len(jobs) - len(errors)
                await self.unreserve(gang, jobs, errors)
            else:
                ctx.stats.binds += len(jobs)
                gang.bind_retry, gang.bind_error = (-math.inf, 0.0), None
                log.info("bind %s: %s", gang.key, ", ".join(sorted({n for _, n, _ in jobs}, key=natural_key)))
                for view, node, _ in jobs:
                    message = f"Successfully assigned {view.key} to {node} with gang {gang.title or gang.key}"
                    ctx.spawn(self.status.event(pod_ref(view), EventReason.SCHEDULED, message))
                if decision.starts_work:
                    ctx.metrics.job_started(decision.job.queue, ctx.clock() - queued_since(decision.job))
        finally:
            if (claims := self._claim_plans.pop(gang.key, None)) is not None and (errors or gang.phase == GangPhase.CALLED_OFF):
                # the claims given to pods that did not bind are undone (bound pods keep theirs)
                current = (gang.pods.get(v.name) for v, _, _ in jobs)
                bound = {v.key for v in current if v is not None and v.bound}
                await self.claims.release(claims, [v.key for v, _, _ in jobs if v.key not in bound])
            if self._call_offs.get(gang.key) is call_off:
                del self._call_offs[gang.key]
            self._binds_over(gang, decision.job)
            ctx.busy -= 1
            mirror.sync(gang, ctx.clock())
            mirror.forget_if_empty(gang)

    # -- PreBind ------------------------------------------------------------------------------

    async def prebind(self, gang: Gang, nodes: set[str], call_off: asyncio.Event | None = None) -> bool:
        """What must be true before the gang's pods may start on ``nodes``: the pods usher
        evicted from them are gone (``wait_for_evictions``). False when the wait was cut short
        (this replica stopped leading)."""
        return await self.wait_for_evictions(nodes, call_off)

    async def bind_volumes(self, gang: Gang, jobs: list[BindJob], call_off: asyncio.Event | None = None) -> str | None:
        """PreBind's volume step: every claim of every pod of the gang bound on the pod's node
        (None), or why not: then no pod is bound, the selected nodes not acted on are withdrawn,
        the pods are told why (a Warning Event) and the gang backs off before it is tried again."""
        ctx = self.ctx
        plan = self.volumes.reserve([(view.key, node) for view, node, _ in jobs])
        if isinstance(plan, Blocker):
            blocker: Blocker | None = plan
        elif plan.empty:
            return None
        else:
            async def show(waiting: Blocker) -> None:
                reason, message = pod_scheduled_condition(PendingReason.WAITING_FOR_VOLUMES, waiting.message)
                for view, _, _ in jobs:
                    if ctx.may_write():
                        try:
                            await ctx.client.patch_pod_condition(view.namespace, view.name, "PodScheduled", ConditionStatus.FALSE,
                                                                 reason, message, may_send=ctx.may_write)
                        except Exception as exc:  # noqa: BLE001 - the wait goes on; said again on the next change
                            log.info("could not say why %s waits: %s", view.key, exc)

            blocker = await self.volumes.prebind(plan, show, call_off)
        if blocker is None:
            return None
        if blocker.reason == VolumeReason.ATTACH_LIMIT and blocker.pod:
            self.volumes.index.crowd(blocker.pod, blocker.node, blocker.claim)  # placed elsewhere next time
        log.info("volumes of %s not bound: %s", gang.key, blocker.message)
        if ctx.may_write():
            first = gang.bind_retry[1] == 0 and gang.bind_error is None
            wait = 0.0 if first else doubled_wait(gang.bind_retry[1], ctx.bind_retry, BIND_RETRY_MAX)
            gang.bind_retry = (ctx.monotonic() + wait, wait)
            gang.bind_error = f"by its volumes: {blocker.message}"
            for view, _, _ in jobs:
                ctx.spawn(self.status.event(pod_ref(view), EventReason.VOLUME_BINDING_FAILED, blocker.message, warning=True))
        return blocker.message

    async def bind_claims(self, gang: Gang, jobs: list[BindJob]) -> str | None:
        """PreBind's device step: every ResourceClaim of every pod of the gang allocated and
        reserved for it (None), or why not: then no pod is bound, no claim of the gang is left
        allocated, the pods are told why and the gang backs off before it is tried again. The
        pods' GPUs become those the claims were given."""
        ctx, state = self.ctx, self.ctx.mirror.state
        placed = [Placed(v.key, v.name, v.namespace, v.uid, node, tuple(gpus),
                         tuple(i for i, f in enumerate(state.node(node).gpu_free) if f == MILLI and i not in gpus))
                  for v, node, gpus in jobs]
        plan = self.claims.reserve(placed)
        if isinstance(plan, ClaimPlan):
            if plan.empty:
                return None
            why = await self.claims.prebind(plan)
            if why is None:
                self._claim_plans[gang.key] = plan
                given = dict(plan.gpus)
                for i, (view, node, gpus) in enumerate(jobs):
                    if view.key in given and sorted(given[view.key]) != sorted(gpus):
                        # usher's placement follows the devices given (it holds them, not those it chose)
                        if gang.job is not None and not ctx.mirror.engine.regpu(gang.job, view.name, list(given[view.key])):
                            log.warning("pod %s was given GPUs %s, not %s: usher's view of node %s differs until "
                                        "the next rebuild", view.key, given[view.key], gpus, node)
                        jobs[i] = (view, node, list(given[view.key]))
                return None
        else:
            why = plan
        log.info("claims of %s not allocated: %s", gang.key, why)
        if ctx.may_write():
            first = gang.bind_retry[1] == 0 and gang.bind_error is None
            wait = 0.0 if first else doubled_wait(gang.bind_retry[1], ctx.bind_retry, BIND_RETRY_MAX)
            gang.bind_retry = (ctx.monotonic() + wait, wait)
            gang.bind_error = f"by its device claims: {why}"
            for view, _, _ in jobs:
                ctx.spawn(self.status.event(pod_ref(view), EventReason.CLAIM_ALLOCATION_FAILED, why, warning=True))
        return why

    async def lead(self, leading: bool) -> None:
        """Each tick, whether this replica leads (and may write): on its first tick as the leader,
        it takes over the PreBinds a replica before it left unfinished (``take_over``)."""
        if not leading:
            self._took_over = False
        elif not self._took_over:
            self._took_over = True
            await self.take_over()

    async def take_over(self) -> None:
        """Finish or undo, never half, the PreBind of a leader that stopped mid-way: a waiting gang
        whose claims carry a selected node that no claim is bound on yet is left to be placed
        under those pins (placement sees them; its PreBind then waits as the old one did), unless
        it cannot fit there (``Mirror.volume_pins``: a node cordoned, not ready or gone, or too
        small for the pods held to it): then the selected nodes are withdrawn, and the gang is
        placed again where its bound claims, if any, allow (and says so if they allow nothing)."""
        mirror = self.ctx.mirror
        # device claims: those a PreBind reserved for pods that never bound are undone, the gang
        # placed again as a whole (``dra_prebind``)
        waiting = {v.uid: v.key for g in mirror.gangs.values() if not g.binding for v in g.unbound()}
        undone = await self.claims.take_over(waiting)
        if undone:
            log.info("took over: undid the allocation of claim(s) %s, reserved for pods never bound", ", ".join(undone))
        for gang in sorted(mirror.gangs.values(), key=lambda g: g.key):
            if gang.binding:
                continue
            unbound = gang.unbound()
            keys = [v.key for v in unbound]
            if not any(self.volumes.index.claim_keys(k) for k in keys):
                continue
            pinned = mirror.volume_pins(unbound)
            if pinned is None:
                continue
            withdrawn = await self.volumes.take_over(keys)
            if withdrawn:
                log.info("took over %s: withdrew the selected node of %s (%s)", gang.key, ", ".join(withdrawn),
                         pinned.message)

    def _labels(self, node: str) -> dict[str, str]:
        view = self.ctx.mirror.nodes.get(node)
        return view.labels if view is not None else {}

    def withdrawn(self, gang: Gang, nodes: set[str]) -> str | None:
        """Why binds decided for ``gang`` onto ``nodes`` must not be sent after all (None: they
        may): while they waited for their room (a victim's grace period), an operator held the job,
        or a node was cordoned (drained), failed or went. The operator was told it is done, and the
        mirror shows it: a bind now would undo the operator's command."""
        mirror = self.ctx.mirror
        if mirror.held(gang):
            return "held by an operator while it waited for its room"
        for name in sorted(nodes, key=natural_key):
            view = mirror.nodes.get(name)
            if view is None:
                return f"node {name} went while it waited for its room"
            if view.unschedulable:
                return f"node {name} was cordoned while it waited for its room"
            if not view.ready:
                return f"node {name} stopped being ready while it waited for its room"
        return None

    async def wait_for_evictions(self, nodes: set[str], call_off: asyncio.Event | None = None) -> bool:
        """Wait until the pods usher evicted from ``nodes`` are gone (they hold their GPUs
        through their grace period), or until ``call_off`` is set (the gang's binds were called
        off: its task ends at once, and the gang goes back to its queue); False if this replica
        stopped leading meanwhile."""
        ctx = self.ctx
        while True:
            if call_off is not None and call_off.is_set():
                return ctx.may_write()
            waits = ctx.departures.on(nodes)
            if not waits:
                return ctx.may_write()
            watched = [asyncio.ensure_future(asyncio.gather(*(ev.wait() for ev in waits)))]
            if call_off is not None:
                watched.append(asyncio.ensure_future(call_off.wait()))
            try:
                done, _ = await asyncio.wait(watched, timeout=EVICTION_WAIT_LOG, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in watched:
                    task.cancel()
                await asyncio.gather(*watched, return_exceptions=True)
            if not done:
                log.info("still waiting for %d evicted pod(s) to leave %s", len(waits), ", ".join(sorted(nodes)))
            if not ctx.may_write():
                return False

    # -- Bind ---------------------------------------------------------------------------------

    async def bind(self, gang: Gang, job: Job, jobs: list[BindJob]) -> list[str]:
        """Send every bind (from here on nothing can call them off, and the job is no victim
        until they are done: what they take cannot be evicted before it is seen bound); the
        errors of those that failed."""
        if gang.phase == GangPhase.RESERVED:
            self.ctx.mirror.move(gang, GangPhase.BINDS_SENT)
        job.settling = True
        return [e for e in await asyncio.gather(*(self.bind_one(gang, *j) for j in jobs)) if e]

    async def bind_one(self, gang: Gang, view: PodView, node: str, gpus: list[int]) -> str | None:
        """Bind one pod (None when it bound), or say why not."""
        ctx = self.ctx
        async with self._bind_slots:
            if not ctx.may_write():
                return f"{view.name}: not bound, the leader lease was lost"
            try:
                await ctx.client.bind(view.namespace, view.name, node, {Annotation.GPUS: ",".join(map(str, gpus))}, view.uid,
                                      may_send=ctx.may_write)
            except NotSent:
                return f"{view.name}: not bound, the leader lease was lost"
            except Exception as exc:  # noqa: BLE001 - API, transport and decoding errors alike
                return f"{view.name}: {exc}"
            ctx.mirror.assume_bound(gang, view.name, node, gpus)
            return None

    # -- Unreserve ----------------------------------------------------------------------------

    async def unreserve(self, gang: Gang, jobs: list[BindJob], errors: list[str]) -> None:
        """Some binds failed: the pods that bound are evicted and the gang torn down (or, with
        none bound, its job goes back to its queue); refused by the API server, the gang backs
        off before it is admitted again."""
        ctx, mirror = self.ctx, self.ctx.mirror
        ctx.stats.bind_errors += len(errors)
        for _ in errors:
            ctx.metrics.bind_failed()
        why = f"{len(errors)} of {len(jobs)} binds failed ({errors[0]})"
        if ctx.may_write():  # refused by the API server, not cut short by a lost lease: back off
            first = gang.bind_retry[1] == 0 and gang.bind_error is None
            wait = 0.0 if first else doubled_wait(gang.bind_retry[1], ctx.bind_retry, BIND_RETRY_MAX)
            gang.bind_retry = (ctx.monotonic() + wait, wait)
            gang.bind_error = f"by the API server: {errors[0]}"
        job = gang.job  # the gang's job now: a rebuild during the binds replaces the decision's
        current = (gang.pods.get(v.name) for v, _, _ in jobs)
        bound = [v for v in current if v is not None and v.bound and v.live]
        log.warning("rollback %s: %s; evicting the %d pod(s) that bound", gang.key, why, len(bound))
        if job is not None and job.current_run is not None:
            if bound:
                # the bound pods hold their nodes until they are gone: tear the gang down
                mirror.tear_down(gang, f"rolled back: {why}", replace=True)
            else:
                mirror.engine.unbind(job, ctx.clock(), why)
        refused = 0
        for view in bound:
            failure = await self.evictor.evict(view, f"rolling back gang {gang.title or gang.key}: {why}", EventReason.GANG_ROLLBACK)
            refused += failure is not None and BUDGET_REFUSED in failure
        if bound and refused == len(bound) and gang.teardown is not None:
            # a budget keeps every bound pod there: rather than half a gang for as long as it
            # refuses, bind the rest where they were to go (the run still holds that room)
            on = {v.name for v in bound}
            gang.to_bind = {v.name: (node, list(gpus)) for v, node, gpus in jobs if v.name not in on}
        ctx.wake.set()

    def _binds_over(self, gang: Gang, job: Job) -> None:
        """A bind task of the gang's ended: nothing of it is in flight any more, for the job it
        bound and for the job a rebuild made for the gang meanwhile."""
        self.ctx.mirror.binds_over(gang)
        job.settling = False
        if gang.job is not None:
            gang.job.settling = False

    # -- the pods an elastic gang grew by, and a refused teardown's --------------------------------

    def grow(self, gang: Gang, job: Job, placements: list[PodPlacement]) -> None:
        """Bind the pods an elastic gang grew by (its own task)."""
        # no call-off here: the grow is as good as sent, and the job no victim until it is done
        self.ctx.mirror.move(gang, GangPhase.BINDS_SENT)
        job.settling = True
        self.ctx.spawn(self._bind_extra(gang, job, placements))

    async def _bind_extra(self, gang: Gang, job: Job, placements: list[PodPlacement]) -> None:
        """Bind pods an elastic gang grew by; one that fails is given back, the gang runs on."""
        ctx, mirror = self.ctx, self.ctx.mirror
        ctx.busy += 1
        failed: set[str] = set()
        jobs: list[BindJob] = []
        try:
            pairs = mirror.pods_of(gang, placements)
            jobs = [(view, mirror.state.nodes[p.node_id].name, p.gpus) for view, p in pairs]
            if not await self.prebind(gang, {node for _, node, _ in jobs}):
                failed = {view.name for view, _, _ in jobs}
            elif (withdrawn := self.withdrawn(gang, {node for _, node, _ in jobs})) is not None:
                log.info("grow %s called off: %s", gang.key, withdrawn)
                failed = {view.name for view, _, _ in jobs}
            elif await self.bind_volumes(gang, jobs) is not None:
                # the pods it grows by are bound only once their claims are, as a gang's first ones
                failed = {view.name for view, _, _ in jobs}
            elif await self.bind_claims(gang, jobs) is not None:
                # and their device claims allocated and reserved (none left allocated when refused)
                failed = {view.name for view, _, _ in jobs}
            else:
                results = await asyncio.gather(*(self.bind_one(gang, *j) for j in jobs))
                failed = {view.name for (view, _, _), error in zip(jobs, results) if error}
                ctx.stats.binds += len(jobs) - len(failed)
                bound = sorted({n for (v, n, _), e in zip(jobs, results) if not e}, key=natural_key)
                if bound:
                    log.info("grow %s: %d more pod(s) on %s", gang.key, len(jobs) - len(failed), ", ".join(bound))
        except Exception:
            log.exception("growing gang %s failed", gang.key)
            failed = {p.pod for p in placements}
        finally:
            if (claims := self._claim_plans.pop(gang.key, None)) is not None and failed:
                # the claims given to pods that did not bind are undone (those bound keep theirs)
                await self.claims.release(claims, [v.key for v, _, _ in jobs if v.name in failed])
            if failed and job.current_run is not None and gang.job is job:
                mirror.engine.shrink(job, failed, ctx.clock())
            self._binds_over(gang, job)
            ctx.busy -= 1
            mirror.sync(gang, ctx.clock())
            mirror.forget_if_empty(gang)

    async def complete(self, gang: Gang) -> bool:
        """Bind the pods a refused teardown left unbound (``Gang.to_bind``: a rollback's, where
        they were to go; a gang found partly bound, where ``Engine.complete`` placed them); True
        when the gang is whole again and runs on."""
        ctx, mirror = self.ctx, self.ctx.mirror
        if not ctx.may_write():
            return False
        views = [(gang.pods.get(name), node, gpus) for name, (node, gpus) in sorted(gang.to_bind.items())]
        if any(v is None or not v.live or v.terminating or (v.bound and v.node != node) for v, node, _ in views):
            # a pod went, or is bound elsewhere: the teardown goes on; a completion placed anew
            # gives its room back, to be placed again at the next refusal
            job = gang.job
            if gang.completable and job is not None and job.current_run is not None:
                mirror.engine.shrink(job, set(gang.to_bind), ctx.clock(), note=False)
                gang.to_bind = {}
            return False
        todo = [(v, node, gpus) for v, node, gpus in views if v is not None and not v.bound]
        errors = [e for e in await asyncio.gather(*(self.bind_one(gang, v, node, gpus) for v, node, gpus in todo)) if e]
        if errors:
            log.warning("completing %s after its teardown was refused: %s", gang.key, errors[0])
            return False
        why = gang.teardown if gang.completable else "its first bind failed"
        log.info("bind %s: completed where its teardown was refused by a PodDisruptionBudget (%s)", gang.key, why)
        for v, node, _ in todo:
            ctx.spawn(self.status.event(pod_ref(v), EventReason.SCHEDULED,
                                        f"Successfully assigned {v.key} to {node} with gang {gang.title or gang.key} "
                                        f"(completed: {why}, and a PodDisruptionBudget kept the rest of the gang running)"))
        mirror.stop_tearing_down(gang)
        gang.to_bind = {}
        gang.complete_at = (-math.inf, 0.0)
        gang.partial = False
        gang.bind_retry, gang.bind_error = (-math.inf, 0.0), None
        mirror.sync(gang, ctx.clock())
        return True
