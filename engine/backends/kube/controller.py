"""The controller against a real (or sandbox) cluster: informers in, binds and evictions out.

``KubeController`` is the façade (``contract.ConsoleController``) over parts cut along
kube-scheduler's seams, one module each, sharing state only through ``context.Context``, the
``Mirror`` and the parts they are handed:

- ``intake``: informers into the mirror (and the queue and decisions ConfigMaps);
- ``driver``: the tick: cycles, and their decisions handed to the evictor and the binder;
- ``binder``: Reserve, PreBind, Bind, Unreserve per gang, whole or not at all;
- ``evictor``: preemption evictions held to PodDisruptionBudgets;
- ``teardown``: a gang that is not whole is stopped whole, or completed;
- ``status``: pods' ``PodScheduled`` conditions and usher's Events;
- ``commands``: operator commands as API writes;
- ``kubelet``: what a kubelet's refusal of a bound pod means for usher's view.

A gang's life through them is one ``gang.GangPhase``, moved only by ``Mirror.move``.

Per-item errors are caught, logged and counted (``usher_controller_errors_total``); the loop
goes on. Only the Lease holder binds, evicts or writes pod conditions; a standby keeps its mirror
warm and takes over within the lease duration.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from ...channel import Command, CommandError, Connection, Snapshot, snapshot_of
from ...enums import Action, Capability, PendingReason
from ...policy.registry import Policy
from ...telemetry import TelemetryStore
from .binder import Binder
from .client import ApiError, ClusterUnreachable, KubeClient, NotFound
from .commands import Commands
from .connection import connection_of
from .context import (
    EVICTION_REFUSED_BACKOFF,
    Context,
    EventReason,
    Source,
    Stats,
    doubled_wait,
)
from .driver import Driver
from .evictor import Evictor
from .health import HealthServer
from .informer import DeltaType
from .intake import Intake
from .lease import LeaderElector
from .metrics import ControllerMetrics, ErrorKind
from .mirror import Mirror
from .objects import natural_key
from .rbac import LEADER_LEASE, USHER_NAMESPACE
from .status import STATUS_INTERVAL, StatusWriter, pod_scheduled_condition, shown_to_operators
from .teardown import Teardown

__all__ = [
    "EVICTION_REFUSED_BACKOFF", "EventReason", "KubeController", "Source", "Stats", "doubled_wait",
    "pod_scheduled_condition", "shown_to_operators",
]

log = logging.getLogger("usher.controller")


class KubeController:
    #: a cluster has pods to read and RBAC to ask, and no pace (``contract.ConsoleController``)
    capabilities = frozenset({Capability.PODS, Capability.PERMISSIONS})

    def __init__(
        self,
        client: KubeClient,
        *,
        identity: str,
        name: str = "cluster",
        namespace: str = USHER_NAMESPACE,
        policy: Policy | str = "usher",
        clock: Callable[[], float] = time.time,
        metrics: ControllerMetrics | None = None,
        lease_duration: float = 15.0,
        schedule: bool = True,
        elect: bool = True,
        readonly: bool = False,
        status_interval: float = STATUS_INTERVAL,
        health: HealthServer | None = None,
    ) -> None:
        metrics = metrics or ControllerMetrics()
        metrics.before_render = self._update_gauges
        ctx = self.ctx = Context(client, Mirror(name, policy), metrics, namespace, identity, clock, schedule, readonly)
        ctx.mirror.monotonic = lambda: ctx.monotonic()
        #: what ``/readyz`` reports (``usher --no-ui``): role, API contact, the last good tick
        self.health = health
        if health is not None:
            # readiness follows the API server's answers to this client (not the watches' state)
            health.expect_api()
            client.add_contact_listener(health.api_contact)
        ctx.elector = (
            LeaderElector(client, namespace, LEADER_LEASE, identity, lease_duration=lease_duration, on_change=self._leadership_changed)
            if elect and schedule
            else None
        )
        self.subscribers: list[Callable[[Snapshot], None]] = []
        self.done = False
        #: a cluster runs in wall time: no speed to set (``Capability.PACE``)
        self.speed: float | None = None
        self.synced = asyncio.Event()
        self._elector_task: asyncio.Task[Any] | None = None
        #: live GPU telemetry, filled by the sources given with ``--telemetry`` (see usher.cluster)
        self.telemetry = TelemetryStore()
        # the parts, each handed what it calls
        self.status = StatusWriter(ctx, lambda name: self.intake.node_object(name),
                                   lambda key, namespace, name: self.intake.owner_object(key, namespace, name))
        self.evictor = Evictor(ctx, self.status, lambda key: self.intake.pod_object(key))
        self.binder = Binder(ctx, self.status, self.evictor)
        self.teardown = Teardown(ctx, self.evictor, self.binder)
        self.intake = Intake(ctx, self.status, self.evictor, self.teardown)
        self.operator_commands = Commands(ctx, self.status, self.evictor)
        self.driver = Driver(ctx, self.intake, self.evictor, self.binder, self.teardown, self.status, self.operator_commands,
                             self._publish, health, status_interval)

    # -- the shared objects and knobs, as callers and tests know them ----------------------------

    client = property(lambda self: self.ctx.client)
    mirror = property(lambda self: self.ctx.mirror)
    metrics = property(lambda self: self.ctx.metrics)
    stats = property(lambda self: self.ctx.stats)
    identity = property(lambda self: self.ctx.identity)
    namespace = property(lambda self: self.ctx.namespace)
    clock = property(lambda self: self.ctx.clock)
    elector = property(lambda self: self.ctx.elector)
    readonly = property(lambda self: self.ctx.readonly)
    #: False for the console: it mirrors the cluster and sends commands, never binds
    schedules = property(lambda self: self.ctx.schedules)
    events = property(lambda self: self.status.events)
    informers = property(lambda self: self.intake.informers)
    config_refusals = property(lambda self: self.intake.config_refusals)
    _wake = property(lambda self: self.ctx.wake)

    def _knob(name: str, owner: str = "ctx"):  # type: ignore[misc]  # a class-body helper
        def get(self):
            return getattr(getattr(self, owner), name)

        def put(self, value) -> None:
            setattr(getattr(self, owner), name, value)

        return property(get, put)

    #: the delta queue (a test may wrap it to lose events on purpose)
    deltas = _knob("deltas")
    #: the clock of the teardown's and the binds' retries (a test drives it)
    monotonic = _knob("monotonic")
    bind_retry = _knob("bind_retry")
    eviction_retry = _knob("eviction_retry")
    node_doubt = _knob("node_doubt")
    #: operator commands queued for the next tick; None before ``run``
    commands = _knob("queue", "driver")
    paused = _knob("paused", "driver")
    status_interval = _knob("status_interval", "driver")
    del _knob

    # -- what watchers see ----------------------------------------------------------------

    @property
    def state(self):
        return self.mirror.state

    @property
    def now(self) -> float:
        return self.clock()

    @property
    def policy(self) -> Policy:
        return self.mirror.engine.policy

    @property
    def is_leader(self) -> bool:
        return self.ctx.is_leader

    @property
    def connection(self) -> Connection:
        """How current the mirror is: live, reconnecting or stale (from the informers)."""
        return connection_of(self.informers, time.time())

    def may_write(self) -> bool:
        """Whether this replica may change the cluster now (``Context.may_write``)."""
        return self.ctx.may_write()

    def verdicts(self) -> dict[int, tuple[PendingReason, str]]:
        """Why each waiting job waits, as the scheduler (the lease holder) wrote it in its pods'
        ``PodScheduled`` condition (``<reason>: <message>``): what a console shows, so it never
        contradicts ``kubectl describe``. Jobs whose pods carry no such condition yet are left out."""
        out: dict[int, tuple[PendingReason, str]] = {}
        for gang in self.mirror.waiting_gangs():
            if gang.job is None or gang.job.current_run is not None:
                continue
            for view in gang.unbound():
                condition = view.conditions.get("PodScheduled")
                if condition is None or condition[0] != "False":
                    continue
                head, _, text = condition[2].partition(": ")
                if head in PendingReason.__members__.values():
                    out[gang.job.id] = (PendingReason(head), text)
                    break
        return out

    def pods_of_job(self, name: str) -> list[tuple[str, str, str | None]]:
        """The pods of the job called ``name`` (``PyTorchJob ns/x``): name, phase, node; for the console."""
        job_id = self.state.job_by_name.get(name)
        gang = self.mirror.gang_of_job.get(job_id) if job_id is not None else None
        if gang is None:
            gang = self.operator_commands.gang_titled(name)  # one kept out of the engine's queue (``Mirror.outside``)
        if gang is None:
            return []
        return [
            (view.key, "Terminating" if view.terminating else str(view.phase), view.node)
            for view in sorted(gang.pods.values(), key=lambda v: natural_key(v.name))
        ]

    async def pod_yaml(self, job_name: str) -> str:
        """The pods of the job called ``job_name`` as ``kubectl get pod -o yaml`` shows them (one
        YAML document each, ``managedFields`` left out as kubectl does), read from the API server
        now, not from the mirror; ``CommandError`` for an unknown job."""
        import yaml

        gang = self.operator_commands.gang_named(job_name)
        docs = []
        for view in sorted(gang.pods.values(), key=lambda v: natural_key(v.name)):
            try:
                pod = await self.client.get(f"/api/v1/namespaces/{view.namespace}/pods/{view.name}")
            except NotFound:
                continue  # deleted since the mirror saw it
            pod.get("metadata", {}).pop("managedFields", None)
            docs.append(pod)
        if not docs:
            raise CommandError(f"the pods of {job_name} are gone")
        return yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False, allow_unicode=True)

    async def pod_logs(
        self, job_name: str, tail_lines: int = 100, max_pods: int = 8
    ) -> list[tuple[str, str, str | None]]:
        """The last ``tail_lines`` lines of each container of the job's first ``max_pods`` pods,
        from ``GET .../pods/{name}/log`` (the kubelet's log through the API server): (``pod`` or
        ``pod/container``, the text, the API server's refusal or None) each, so a pod that has
        not started says why (``container "w" in pod "p" is waiting to start: ...``)."""
        gang = self.operator_commands.gang_named(job_name)
        out: list[tuple[str, str, str | None]] = []
        for view in sorted(gang.pods.values(), key=lambda v: natural_key(v.name))[:max_pods]:
            path = f"/api/v1/namespaces/{view.namespace}/pods/{view.name}"
            try:
                pod = await self.client.get(path)
            except NotFound:
                continue
            containers = [c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or []]
            for container in containers:
                title = view.name if len(containers) == 1 else f"{view.name}/{container}"
                params = {"container": container, "tailLines": str(tail_lines)}
                try:
                    out.append((title, await self.client.get_text(f"{path}/log", params=params), None))
                except ApiError as error:
                    out.append((title, "", f"{error.code} {error.reason}: {error.message}"))
                except ClusterUnreachable as exc:
                    out.append((title, "", str(exc)))
        return out

    def _leadership_changed(self, leading: bool) -> None:
        log.info("%s %s the lease", self.identity, "holds" if leading else "lost")
        self.metrics.set_leader(leading)
        if leading:
            # its first decisions rest on the engine's state derived afresh from the cluster, not
            # on what it pieced together watching another leader (binds and evictions mid-way)
            self.mirror.dirty = True
        self.ctx.wake.set()

    def snapshot(self) -> Snapshot:
        """The engine's figures, and the gangs usher answers for that its engine's state does not
        show as they are (waiting outside its queues, with the reason and the fix)."""
        return snapshot_of(self.state, self.clock(), self.mirror.outside())

    def subscribe(self, callback: Callable[[Snapshot], None]) -> None:
        self.subscribers.append(callback)

    def post(self, cmd: Command) -> asyncio.Future[str]:
        """Queue an operator command for the next tick; the future gives its result."""
        if self.commands is None:
            raise CommandError("not connected yet")
        cmd.reply = asyncio.get_running_loop().create_future()
        self.commands.put_nowait(cmd)
        self.ctx.wake.set()
        return cmd.reply

    async def apply_command(self, cmd: Command) -> str:
        """Carry out an operator command through the API; the watch brings its effect back."""
        return await self.operator_commands.apply(cmd)

    async def forbidden_actions(self) -> dict[Action, str]:
        """The operator actions this identity may not carry out, each with the reason."""
        return await self.operator_commands.forbidden_actions()

    def _publish(self) -> None:
        if self.subscribers:
            snap = self.snapshot()
            for cb in self.subscribers:
                cb(snap)

    def _apply(self, source: Source, kind: DeltaType, obj: dict[str, Any]) -> None:
        """One delta into the mirror, as the informers deliver it (``Intake.apply``)."""
        self.intake.apply(source, kind, obj)

    def _spawn(self, coro) -> asyncio.Task[Any]:
        return self.ctx.spawn(coro)

    # -- the loop -------------------------------------------------------------------------

    async def run(self, speed: float | None = None) -> None:
        """Run until cancelled (SIGTERM in ``--no-ui``); ``speed`` is accepted for the console."""
        ctx, intake = self.ctx, self.intake
        self.commands = asyncio.Queue()
        informers = intake.start()
        for inf in informers:
            inf.on_error = lambda: self.metrics.controller_error(ErrorKind.WATCH)
            ctx.spawn(inf.run())
        if ctx.elector is not None:
            self._elector_task = ctx.spawn(ctx.elector.run())
        try:
            await asyncio.gather(*(inf.has_synced.wait() for inf in informers))
            intake.drain()
            if intake.pending_config is None:
                intake.pending_config = (None, None)  # no queue ConfigMap at all: say so from the start
            await intake.load_config()
            try:
                self.mirror.rebuild(self.clock())
            except Exception:  # as in the loop: logged, counted, and the next tick rebuilds again
                self.metrics.controller_error(ErrorKind.CYCLE)
                log.exception("the first rebuild of the engine's state failed; the loop tries again")
                self.mirror.dirty = True
            self.synced.set()
            log.info("synced: %d nodes, %d gangs", len(self.mirror.nodes), len(self.mirror.gangs))
            while True:
                try:
                    await self.driver.tick()
                    if self.health is not None:
                        self.health.cycle_done()
                except Exception:  # the loop outlives any one failure
                    self.metrics.controller_error(ErrorKind.CYCLE)
                    log.exception("a controller tick failed; going on with the next")
                    self.mirror.dirty = True  # derive the engine's state from the caches again
                try:
                    # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
                    # that races the wake-up, and a cancelled controller would then run on
                    async with asyncio.timeout(1.0):
                        await ctx.wake.wait()
                except TimeoutError:
                    pass
                ctx.wake.clear()
                await asyncio.sleep(0.01)  # let a burst of watch events gather into one batch
        finally:
            await self.stop()

    async def stop(self) -> None:
        """Stop: binds and evictions in flight are cancelled first, and only then is the lease
        handed back, so no standby takes over while this replica's writes still land."""
        if self.health is not None:
            self.health.set_not_ready("stopping")
        for inf in self.informers:
            inf.stop()
        tasks = self.ctx.tasks
        others = [t for t in tasks if t is not self._elector_task]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        if self.elector is not None:
            await self.elector.release()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.done = True

    # -- metrics and idleness --------------------------------------------------------------

    def _update_gauges(self) -> None:
        waiting = [g.reason for g in self.mirror.gangs.values() if g.reason is not None and g.unbound()]
        self.metrics.observe_state(self.state, self.clock(), waiting)

    @property
    def idle(self) -> bool:
        """Nothing queued, nothing in flight: what the tests' lockstep harness waits for."""
        ctx = self.ctx
        return (self.synced.is_set() and ctx.deltas.empty() and ctx.busy == 0 and not ctx.wake.is_set()
                and not self.mirror.backing_off)

    async def wait_idle(self, settle: int = 3) -> None:
        quiet = 0
        while quiet < settle:
            await asyncio.sleep(0.01)
            quiet = quiet + 1 if self.idle else 0
