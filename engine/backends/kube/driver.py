"""The cycle driver: one tick of the controller, from the deltas to the decisions carried out.

A tick reads as a table of contents: apply the deltas (intake), retry what backed off, load a new
queue config, rebuild the engine's state if something structural changed, carry out the
operators' commands, and then, on the leader only: the teardown pass, the scheduling cycles, and
now and then a status round. Each cycle's decisions are carried out evictions first (policy/v1
Eviction; a PodDisruptionBudget refusal is reported, and the binds of that cycle are withdrawn
so nothing lands on capacity that is still in use), then a bind task per admitted gang
(``Binder.reserve``). Elastic gangs grow by their waiting pods after the cycles.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from ...admission import CycleResult, Decision
from ...channel import Command, CommandError, settle_reply
from ...enums import AuditAction, DecisionKind, EndReason
from ...state import AuditEntry
from .binder import Binder
from .commands import Commands
from .context import EVICTION_REFUSED_BACKOFF, Context, EventReason, nodes_of, pod_ref
from .evictor import Evictor, why_evicted
from .health import HealthServer
from .intake import Intake
from .metrics import ErrorKind
from .status import StatusWriter
from .teardown import Teardown

log = logging.getLogger("usher.controller")

#: scheduling cycles per tick at most (another runs only while the last one evicted)
MAX_PASSES = 4


class Driver:
    """The tick, the cycles, and the decisions handed to the evictor and the binder."""

    def __init__(self, ctx: Context, intake: Intake, evictor: Evictor, binder: Binder, teardown: Teardown,
                 status: StatusWriter, commands: Commands, publish: Callable[[], None], health: HealthServer | None,
                 status_interval: float) -> None:
        self.ctx = ctx
        self.intake = intake
        self.evictor = evictor
        self.binder = binder
        self.teardown = teardown
        self.status = status
        self.commands = commands
        self.publish = publish
        self.health = health
        self.status_interval = status_interval
        #: operator commands queued for the next tick (``KubeController.post``); None before ``run``
        self.queue: asyncio.Queue[Command] | None = None
        self.paused = False
        self._last_status = 0.0
        self._status_round: asyncio.Task[None] | None = None

    async def tick(self) -> None:
        ctx, mirror = self.ctx, self.ctx.mirror
        ctx.busy += 1
        try:
            self.intake.drain()
            mirror.retake_short()  # room freed since (runs stopped, rooms given back)
            mirror.retry_binds(ctx.clock())
            await self.intake.load_config()
            now = ctx.clock()
            if mirror.spared_until is not None and now >= mirror.spared_until:
                mirror.dirty = True  # gangs spared after a refused eviction may be victims again
            if mirror.needs_compaction():
                mirror.dirty = True  # drop the jobs of gangs long gone
            if mirror.dirty:
                mirror.rebuild(now)
            while self.queue is not None and not self.queue.empty():
                await self._command(self.queue.get_nowait(), now)
            leader = ctx.is_leader
            ctx.metrics.set_leader(leader)
            if self.health is not None:
                self.health.set_role(leader)
            await self.binder.lead(leader and not self.paused)  # a new leader takes over unfinished PreBinds
            if leader and not self.paused:
                if mirror.dirty:
                    # marked while a command was awaited (leadership won meanwhile, a refused
                    # eviction): decide on the state derived afresh, not on the one it replaces
                    mirror.rebuild(ctx.clock())
                await self.teardown.run()
                await self.schedule()
                # (not while the engine's state awaits a rebuild: after a called-off preemption it
                # takes the victims for stopped, and would tell the preemptor their GPUs are free)
                if (now - self._last_status >= self.status_interval and not mirror.dirty
                        and (self._status_round is None or self._status_round.done())):
                    # one round at a time: on a slow API server rounds would pile up, each
                    # writing the same conditions (and Events) again
                    self._last_status = now
                    self._status_round = ctx.spawn(self.status.write_status())
            self.publish()
        finally:
            ctx.busy -= 1

    async def _command(self, cmd: Command, now: float) -> None:
        """Carry out one operator command; whatever happens, its reply comes."""
        ctx = self.ctx
        audit = ctx.mirror.state.audit
        try:
            settle_reply(cmd, await self.commands.apply(cmd))
        except CommandError as exc:
            audit.append(AuditEntry(now, cmd.actor, str(cmd.action), "?", f"rejected: {exc}"))
            settle_reply(cmd, error=exc)
        except Exception as exc:  # noqa: BLE001 - an API or transport failure is the command's, not the loop's
            ctx.metrics.controller_error(ErrorKind.COMMAND)
            log.warning("%s by %s failed: %s", cmd.action, cmd.actor, exc)
            audit.append(AuditEntry(now, cmd.actor, str(cmd.action), "?", f"failed: {exc}"))
            settle_reply(cmd, error=CommandError(f"{cmd.action}: {exc}"))

    async def schedule(self) -> None:
        ctx, mirror = self.ctx, self.ctx.mirror
        engine = mirror.engine
        for job, pods in engine.shrink_for_waiting(ctx.clock()):
            gang = mirror.gang_of_job.get(job.id)
            views = [gang.pods[name] for name in sorted(pods) if gang is not None and name in gang.pods]
            why = f"{job.name} gives back a pod beyond its minimum to a job of higher priority"
            refusals = list(await asyncio.gather(*(self.evictor.eviction_refusal(v) for v in views)))
            if not any(refusals):
                refusals = self.evictor.over_budget(views)  # together they may exceed one budget
            for view, refused in zip(views, refusals):
                if refused is not None:
                    await self.status.event(pod_ref(view), EventReason.EVICTION_BLOCKED,
                                            f"usher did not evict this pod ({why}): {refused}", warning=True)
            failed = next((r for r in refusals if r is not None), None)
            if failed is None:
                log.info("shrink %s: evicting %s to make room for a job of higher priority", job.name, ", ".join(v.name for v in views))
                failures = [f for f in await asyncio.gather(*(self.evictor.evict(v, why, EventReason.PREEMPTED) for v in views)) if f]
                failed = failures[0] if failures else None
            if failed is not None and gang is not None:
                # the engine gave those pods' GPUs away already: nothing is decided on that until
                # the next tick has derived its state from the cluster, where they still run
                log.warning("shrink %s called off: %s", job.name, failed)
                mirror.spare(gang, ctx.clock() + EVICTION_REFUSED_BACKOFF)
                return
        for _ in range(MAX_PASSES):
            now = ctx.clock()
            started = time.perf_counter()
            result = engine.cycle(now)
            ctx.metrics.observe_cycle(time.perf_counter() - started)
            ctx.stats.cycles += 1
            if ctx.stats.first_cycle_at is None:
                ctx.stats.first_cycle_at = time.perf_counter()
            if not result.decisions:
                break
            await self._carry_out(result.decisions, now)
            if mirror.dirty:
                # an eviction was refused: the engine's state takes the victims for stopped, so
                # nothing more is decided on it (a bind onto their nodes would overcommit them)
                # until the next tick has derived it again from the cluster
                return
            if not result.evicted:
                break
        self._grow(engine.grow(ctx.clock(), mirror.missing_pods))

    def _grow(self, result: CycleResult) -> None:
        """Bind the pods that elastic gangs grew by (one task per gang)."""
        by_job: dict[int, list[Decision]] = {}
        for d in result.decisions:
            by_job.setdefault(d.job.id, []).append(d)
        for job_id, decisions in by_job.items():
            gang = self.ctx.mirror.gang_of_job.get(job_id)
            if gang is not None and not gang.binding:
                self.binder.grow(gang, decisions[0].job, [p for d in decisions for p in d.placements])

    async def _carry_out(self, decisions: list[Decision], now: float) -> None:
        ctx, mirror = self.ctx, self.ctx.mirror
        evictions = [d for d in decisions if d.kind == DecisionKind.EVICT]
        binds = [d for d in decisions if d.kind == DecisionKind.BIND]
        if evictions and binds and not await self.evictor.evictions_allowed(evictions, now):
            why = "an eviction it needed is forbidden by a PodDisruptionBudget"
            self._call_off(binds, now, why)
            for d in evictions:  # a move called off: its mover runs on where it is
                room = mirror.state.give_back_room(d.job.id, now)
                if room is not None:
                    mirror.state.audit.append(AuditEntry(
                        now, "scheduler", AuditAction.KEEP_ROOM, d.job.name,
                        f"gave back the room kept on {nodes_of(mirror.state, room.placements)}: the move was called off ({why})",
                    ))
            return
        for d in evictions:
            gang = mirror.gang_of_job.get(d.job.id)
            if gang is not None and gang.binding:
                # its bind task still waits for its own room: it must not bind now
                self.binder.call_off(gang, f"preempted before its binds were sent ({why_evicted(mirror.state, d)})")
        blocked = False
        for d in evictions:
            if d.job.id in mirror.state.kept_rooms:
                ctx.metrics.job_moved(d.job.queue)
            elif d.reason == EndReason.PREEMPTED:
                ctx.metrics.job_preempted(d.job.queue)
            if d.reason is not None and d.reason != EndReason.FINISHED:
                ctx.metrics.job_evicted(d.reason)
            why = why_evicted(mirror.state, d)
            log.info("evict %s (%s): %s", d.job.name, why, nodes_of(mirror.state, d.placements))
            gang = mirror.gang_of_job.get(d.job.id)
            if await self.evictor.evict_gang(gang, why):
                blocked = True
                assert gang is not None
                mirror.spare(gang, now + EVICTION_REFUSED_BACKOFF)
                break  # the preemption cannot finish: no more victims lose their work for it
        for d in binds:
            ctx.metrics.job_admitted(d.job.queue)
        if blocked:
            self._call_off(binds, now, "an eviction it needed was refused")
            return
        for d in binds:
            gang = mirror.gang_of_job.get(d.job.id)
            if gang is None:
                continue
            if gang.binding:
                # its bind task of before, called off, has not ended yet: two tasks must never
                # bind one gang (the old one would send its old decision), so this one is decided
                # again at the next tick
                mirror.engine.unbind(d.job, now, None)
                if d.returning is not None:
                    mirror.state.keep_room(d.returning, now)
                ctx.wake.set()
                continue
            self.binder.reserve(gang, d)

    def _call_off(self, binds: list[Decision], now: float, why: str) -> None:
        """A cycle's evictions did not (all) happen: none of its binds is made (a moved job that
        was coming back keeps its room), and the next tick derives the engine's state from the
        cluster again, where the victims still run."""
        mirror = self.ctx.mirror
        for d in binds:
            mirror.engine.unbind(d.job, now, why)
            if d.returning is not None:
                mirror.state.keep_room(d.returning, now)
        mirror.dirty = True
