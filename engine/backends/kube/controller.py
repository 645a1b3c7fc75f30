"""The controller loop against a real (or sandbox) cluster: informers in, binds and evictions out.

``KubeController.run`` lists and watches nodes, the pods with ``schedulerName: usher``, every
assigned unfinished pod (what other schedulers' pods hold), the queues ConfigMap and the owners
of pods (Jobs, JobSets, Kubeflow jobs, RayClusters, LeaderWorkerSets, PodGroups: gang sizes);
a console also watches usher's Events (the scheduler's decisions). The ``Mirror`` turns what they
report into engine operations; after each batch of changes the leader runs scheduling cycles and
carries out the decisions:

- evictions first (policy/v1 Eviction; a PodDisruptionBudget refusal is reported, and the binds
  of that cycle are withdrawn so nothing lands on capacity that is still in use);
- then each admitted gang is bound pod by pod, concurrently, over the client's kept-alive
  connection pool. A gang is bound completely or not at all: if any bind fails (a refusal, a
  transport error, a lost lease), the pods that did bind are evicted and the gang is torn down
  and requeued. Binds to a node wait until pods we evicted from it are gone, however long.
- a gang that loses a member by any route is torn down whole (``Gang.teardown``); elastic
  gangs grow by their waiting pods and give back lost extras instead.
- a pod the node's kubelet refuses at admission (``OutOfnvidia.com/gpu``, ``NodePorts``, ...:
  ``refusals``) means usher's view of that node is wrong: its gang backs off (a wait doubled at
  each refusal), nothing is placed on the node for a while (``Mirror.doubt``), the node and its
  pods are listed again and what the mirror missed taken in (which lifts the doubt), and it is
  counted (``usher_bind_refusals_total{reason}``), logged and told in a Warning Event
  ``UsherBindRefused`` on the Node, usher's count beside the kubelet's.

Per-item errors are caught, logged and counted (``usher_controller_errors_total``); the loop
goes on. The queue config is parsed off the event loop, within bounded-YAML limits.

Only the Lease holder binds, evicts or writes pod conditions; a standby keeps its mirror warm and
takes over within the lease duration. Pending pods get the ``PodScheduled=False`` condition with
the engine's reason and one-sentence message, and an Event when the reason changes, so
``kubectl describe pod`` says why a pod waits. Operator commands (from the console) become API
writes: annotations for approve/hold, a node patch for cordon, evictions for preempt and drain, a
ConfigMap update with a resourceVersion precondition for quotas; each is recorded as an Event.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import math
import random
import re
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ...controller import Command, Snapshot, settle_reply, snapshot_of
from ...core import CommandError
from ...admission import CycleResult, Decision
from ...enums import Action, AuditAction, Capability, DecisionKind, EndReason, PendingReason
from ...explain import explain_all
from ...fmt import QueueResource, figure, limits_change, plural
from ...policy.registry import Policy
from ...scenario import ScenarioError, parse_queue_config_async
from ...state import MILLI, AuditEntry, Job, PodPlacement
from ...telemetry import TelemetryStore
from .client import (
    COMPONENT,
    ApiError,
    ClusterUnreachable,
    ConditionStatus,
    DisruptionBudgetBlocked,
    EventType,
    KubeClient,
    NotFound,
    NotSent,
    ObjectRef,
)
from .connection import Connection, connection_of
from ...config_errors import ConfigRefusal
from .events import EventRecorder
from .health import HealthServer
from .informer import DeltaType, Informer
from .lease import LeaderElector
from .metrics import ControllerMetrics, ErrorKind, queued_since
from .mirror import Gang, Mirror
from .refusals import Refusal, kubelet_refusal, usher_count
from .objects import (
    LIMIT_FIELDS,
    SCHEDULER_NAME,
    Annotation,
    Phase,
    PodView,
    as_the_kubelet_counts,
    edit_queue_limits,
    holding_of,
    key_of,
    natural_key,
    node_view,
    parse_time,
    pod_view,
    selector_matches,
)
from .owners import OWNER_RESOURCES, GroupSpec, OwnerKey, OwnerResource, infer_group
from .decisions import DecisionsError, decide, format_decisions, parse_decisions
from .rbac import DECISIONS_CONFIG_KEY, DECISIONS_CONFIGMAP, LEADER_LEASE, QUEUES_CONFIG_KEY, QUEUES_CONFIGMAP, USHER_NAMESPACE

log = logging.getLogger("usher.controller")

MAX_PASSES = 4
#: binds in flight at most (and no more than the client's connections that Events leave, so
#: that the leader check right before each bind is not followed by a wait for a connection)
BIND_CONCURRENCY = 64
#: the share of the client's connections Events may take, so that binds keep the rest
EVENT_SHARE = 0.25
#: how often pending pods' conditions are brought up to date, and how stale a message may get
STATUS_INTERVAL = 5.0
MESSAGE_REFRESH = 60.0
#: how often a bind that waits for evicted pods to leave its nodes says it is still waiting
EVICTION_WAIT_LOG = 60.0
#: how long a teardown waits before asking again to evict a pod whose eviction failed; the wait
#: doubles with every try that fails (a PodDisruptionBudget may refuse for hours), up to
#: ``EVICTION_RETRY_MAX``
EVICTION_RETRY = 10.0
EVICTION_RETRY_MAX = 300.0
#: a gang whose binds failed is admitted again at once the first time, then after 1 s, 2, 4, ...
#: up to ``BIND_RETRY_MAX`` while its binds keep failing (an admission webhook that refuses a pod
#: for good must not make usher bind and roll back its gang hundreds of times a second)
BIND_RETRY = 1.0
BIND_RETRY_MAX = 300.0
#: how long (seconds) a gang whose eviction was refused (a PodDisruptionBudget) is no victim and
#: no mover, so that usher does not ask again every tick
EVICTION_REFUSED_BACKOFF = 60.0
#: how long usher places nothing on a node whose kubelet refused a pod it bound there, unless it
#: finds at once what it had missed there; doubled at each refusal there, up to ``BIND_RETRY_MAX``
NODE_DOUBT = 10.0
#: what ``_evict`` says of an eviction a PodDisruptionBudget refused
BUDGET_REFUSED = "refused by a PodDisruptionBudget"
#: the pods that hold capacity on their node: assigned and not finished (kube-scheduler's view)
ASSIGNED_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"


def doubled_wait(last: float, base: float, cap: float) -> float:
    """The next wait of a retry that keeps failing: ``base`` at first (``last`` 0), then twice
    the last, never more than ``cap`` (nor less than ``base``)."""
    return min(max(2 * last, base), max(cap, base))


NO_GOOD_CONFIG_YET = "no good queue config has been loaded yet, so every pod waits (UnknownQueue) until it is fixed"
"""What a queue config error adds when there is no last good config to keep (at start)."""


class Source(StrEnum):
    NODES = "nodes"
    PODS = "pods"
    #: every assigned, unfinished pod on any node, whoever placed it (what usher must not overcommit)
    ASSIGNED_PODS = "assigned-pods"
    CONFIG = "config"
    #: the workloads that own pods (Jobs, JobSets, PyTorchJobs, ...) and PodGroups: gang sizes
    OWNERS = "owners"
    #: usher's Events (for a console: the scheduler's decisions)
    DECISIONS = "decisions"
    #: PodDisruptionBudgets: how many of a workload's pods may be evicted now
    BUDGETS = "budgets"
    #: namespaces: their labels, which a queue's namespaceSelector reads
    NAMESPACES = "namespaces"
    #: the operators' approvals and holds (ConfigMap usher-decisions)
    OPERATOR_DECISIONS = "operator-decisions"


class EventReason(StrEnum):
    """The reasons of the Events usher records on pods and on its ConfigMap."""

    #: a pod bound to its node (kube-scheduler's reason and wording)
    SCHEDULED = "Scheduled"
    PREEMPTED = "Preempted"
    GANG_ROLLBACK = "GangRollback"
    GANG_BROKEN = "GangBroken"
    EVICTION_BLOCKED = "EvictionBlocked"
    #: on a Node: its kubelet refused a pod usher bound there (usher's view of it was wrong)
    BIND_REFUSED_BY_KUBELET = "UsherBindRefused"
    INVALID_QUEUE_CONFIG = "InvalidQueueConfig"
    INVALID_OPERATOR_DECISIONS = "InvalidOperatorDecisions"


@dataclass(slots=True)
class Stats:
    """Counters for the note, the benchmark and the console."""

    binds: int = 0
    bind_errors: int = 0
    evictions: int = 0
    evictions_blocked: int = 0
    status_writes: int = 0
    cycles: int = 0
    first_cycle_at: float | None = None


@dataclass(slots=True)
class _Written:
    reason: str
    message: str
    at: float


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
        self.client = client
        self.identity = identity
        self.namespace = namespace
        self.clock = clock
        self.metrics = metrics or ControllerMetrics()
        self.metrics.before_render = self._update_gauges
        self.mirror = Mirror(name, policy)
        self.readonly = readonly
        #: False for the console: it mirrors the cluster and sends commands, never binds
        self.schedules = schedule
        self.status_interval = status_interval
        #: what ``/readyz`` reports (``usher --no-ui``): role, API contact, the last good tick
        self.health = health
        if health is not None:
            # readiness follows the API server's answers to this client (not the watches' state)
            health.expect_api()
            client.add_contact_listener(health.api_contact)
        self.elector = (
            LeaderElector(client, namespace, LEADER_LEASE, identity, lease_duration=lease_duration, on_change=self._leadership_changed)
            if elect and schedule
            else None
        )
        self.deltas: asyncio.Queue[tuple[Source, DeltaType, dict[str, Any]]] = asyncio.Queue()
        self.informers: list[Informer] = []
        self.stats = Stats()
        self.subscribers: list[Callable[[Snapshot], None]] = []
        self.commands: asyncio.Queue[Command] | None = None
        self.paused = False
        self.done = False
        #: a cluster runs in wall time: no speed to set (``Capability.PACE``)
        self.speed: float | None = None
        self.synced = asyncio.Event()
        self._wake = asyncio.Event()
        self._busy = 0
        self._written: dict[str, _Written] = {}
        #: pods we evicted and have not yet seen go, by uid: (their node, their key, set when gone)
        self._gone_waiters: dict[str, tuple[str | None, str, asyncio.Event]] = {}
        #: per gang key, set when the gang's bind task, still waiting for its room, is called off
        #: (``Gang.called_off``): the task stops waiting at once
        self._call_offs: dict[str, asyncio.Event] = {}
        #: when a teardown may next ask to evict each pod (monotonic seconds), and the wait it
        #: left before that try, by uid
        self._evict_tried: dict[str, tuple[float, float]] = {}
        #: the clock of the teardown's and the binds' retries (a test drives it)
        self.monotonic: Callable[[], float] = time.monotonic
        self.mirror.monotonic = lambda: self.monotonic()
        self.bind_retry = BIND_RETRY
        self.node_doubt = NODE_DOUBT
        #: the last wait after a kubelet refused a pod of each gang (by key), and of each node:
        #: doubled at the next refusal (a bind that succeeds does not reset it; a pod that runs does)
        self._refusal_waits: dict[str, float] = {}
        self._doubt_waits: dict[str, float] = {}
        #: PodDisruptionBudgets by namespace/name, as the informer last saw them
        self._budgets: dict[str, dict[str, Any]] = {}
        self.eviction_retry = EVICTION_RETRY
        pool = client.pool_size
        events = max(1, int(pool * EVENT_SHARE))
        self._event_slots = asyncio.Semaphore(events)
        self.events = EventRecorder(client)
        self._bind_slots = asyncio.Semaphore(max(1, min(BIND_CONCURRENCY, pool - events)))
        self._tasks: set[asyncio.Task[Any]] = set()
        self._last_status = 0.0
        self._status_round: asyncio.Task[Any] | None = None
        self._elector_task: asyncio.Task[Any] | None = None
        #: owner informers by resource key (``batch/Job``); both MPIJob versions share one key
        self._owner_informers: dict[str, list[Informer]] = {}
        self._pods: Informer | None = None
        #: the owners each usher pod's gang was read from, and the pods read from each owner
        self._depends: dict[str, tuple[OwnerKey, ...]] = {}
        self._dependents: dict[OwnerKey, set[str]] = {}
        #: each usher pod's gang as last inferred (an owner's status change that alters none is skipped)
        self._groups: dict[str, GroupSpec] = {}
        #: the lines of usher's Events in this (console's) audit trail, by the Event's uid (``_decision``)
        self._decisions_seen: dict[str, AuditEntry] = {}
        #: the newest queue ConfigMap seen, not yet parsed: (it, or None when deleted; the object last seen)
        self._pending_config: tuple[dict[str, Any] | None, dict[str, Any] | None] | None = None
        self._nodes: Informer | None = None
        #: the ConfigMaps refused now (by name), with every error: what the console shows
        self.config_refusals: dict[str, ConfigRefusal] = {}
        #: live GPU telemetry, filled by the sources given with ``--telemetry`` (see usher.cluster)
        self.telemetry = TelemetryStore()

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
        if not self.schedules:
            return False
        return self.elector is None or self.elector.is_leader

    @property
    def connection(self) -> Connection:
        """How current the mirror is: live, reconnecting or stale (from the informers)."""
        return connection_of(self.informers, time.time())

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
            gang = self._gang_titled(name)  # one kept out of the engine's queue (``Mirror.outside``)
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

        gang = self._gang_named(job_name)
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
        gang = self._gang_named(job_name)
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
        self._wake.set()

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
        self._wake.set()
        return cmd.reply

    async def forbidden_actions(self) -> dict[Action, str]:
        """The operator actions this identity may not carry out, each with the reason.

        Asked once per action with SelfSubjectAccessReviews (the client caches the answers), so
        the console can show a forbidden action disabled instead of trying it blindly.
        """
        needs: dict[Action, list[tuple[str, str, str, str, str]]] = {
            Action.CORDON: [("patch", "nodes", "", "", "")],
            Action.UNCORDON: [("patch", "nodes", "", "", "")],
            Action.DRAIN: [("patch", "nodes", "", "", ""), ("create", "pods", "eviction", "", "")],
            Action.PREEMPT: [("create", "pods", "eviction", "", "")],
            Action.APPROVE: [("update", "configmaps", "", self.namespace, DECISIONS_CONFIGMAP)],
            Action.HOLD: [("update", "configmaps", "", self.namespace, DECISIONS_CONFIGMAP)],
            Action.RELEASE: [("update", "configmaps", "", self.namespace, DECISIONS_CONFIGMAP)],
            Action.SET_QUOTA: [("update", "configmaps", "", self.namespace, QUEUES_CONFIGMAP)],
        }
        out: dict[Action, str] = {}
        for action, checks in needs.items():
            for verb, resource, sub, namespace, name in checks:
                try:
                    allowed = await self.client.access_review(
                        verb, resource, namespace=namespace, subresource=sub, name=name
                    )
                except ApiError as exc:
                    out[action] = f"could not ask the API server whether you may {verb} {resource}: {exc}"
                    break
                if not allowed:
                    what = (f"{resource}/{sub}" if sub else resource) + (f" {name}" if name else "")
                    where = f" in {namespace}" if namespace else ""
                    out[action] = f"your RBAC does not allow {verb} on {what}{where}"
                    break
        return out

    def _publish(self) -> None:
        if self.subscribers:
            snap = self.snapshot()
            for cb in self.subscribers:
                cb(snap)

    # -- the loop -------------------------------------------------------------------------

    def _informers(self) -> list[Informer]:
        def feed(source: Source):
            def put(kind: DeltaType, obj: dict[str, Any]) -> None:
                self.deltas.put_nowait((source, kind, obj))
                self._wake.set()

            return put

        def feed_owner(resource: OwnerResource):
            def put(kind: DeltaType, obj: dict[str, Any]) -> None:
                self.deltas.put_nowait((Source.OWNERS, kind, {"resource": resource.key, "object": obj}))
                self._wake.set()

            return put

        client = self.client
        decisions = (
            # a console shows what the scheduler decided: usher's Events on pods (binds, preemptions, teardowns)
            [Informer(client, "/api/v1/events", field_selector=f"source={COMPONENT}", on_event=feed(Source.DECISIONS), optional=True)]
            if not self.schedules
            else []
        )
        self._owner_informers = {}
        for resource in OWNER_RESOURCES:
            informer = Informer(client, resource.path, on_event=feed_owner(resource), optional=True)
            self._owner_informers.setdefault(resource.key, []).append(informer)
        self._pods = Informer(client, "/api/v1/pods", field_selector=f"spec.schedulerName={SCHEDULER_NAME}", on_event=feed(Source.PODS))
        self._nodes = Informer(client, "/api/v1/nodes", on_event=feed(Source.NODES))
        budgets = [Informer(client, "/apis/policy/v1/poddisruptionbudgets", on_event=feed(Source.BUDGETS), optional=True)] if self.schedules else []
        return [
            *budgets,
            self._nodes,
            self._pods,
            Informer(client, "/api/v1/pods", field_selector=ASSIGNED_PODS, on_event=feed(Source.ASSIGNED_PODS)),
            Informer(
                client,
                f"/api/v1/namespaces/{self.namespace}/configmaps",
                field_selector=f"metadata.name={QUEUES_CONFIGMAP}",
                on_event=feed(Source.CONFIG),
            ),
            Informer(
                client,
                f"/api/v1/namespaces/{self.namespace}/configmaps",
                field_selector=f"metadata.name={DECISIONS_CONFIGMAP}",
                on_event=feed(Source.OPERATOR_DECISIONS),
            ),
            Informer(client, "/api/v1/namespaces", on_event=feed(Source.NAMESPACES)),
            *(inf for informers in self._owner_informers.values() for inf in informers),
            *decisions,
        ]

    async def run(self, speed: float | None = None) -> None:
        """Run until cancelled (SIGTERM in ``--no-ui``); ``speed`` is accepted for the console."""
        self.commands = asyncio.Queue()
        self.informers = self._informers()
        for inf in self.informers:
            inf.on_error = lambda: self.metrics.controller_error(ErrorKind.WATCH)
            self._spawn(inf.run())
        if self.elector is not None:
            self._elector_task = self._spawn(self.elector.run())
        try:
            await asyncio.gather(*(inf.has_synced.wait() for inf in self.informers))
            self._drain()
            if self._pending_config is None:
                self._pending_config = (None, None)  # no queue ConfigMap at all: say so from the start
            await self._load_config()
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
                    await self._tick()
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
                        await self._wake.wait()
                except TimeoutError:
                    pass
                self._wake.clear()
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
        others = [t for t in self._tasks if t is not self._elector_task]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        if self.elector is not None:
            await self.elector.release()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.done = True

    def _spawn(self, coro) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task failed: %r", task.exception(), exc_info=task.exception())

    async def _tick(self) -> None:
        self._busy += 1
        try:
            self._drain()
            self.mirror.retake_short()  # room freed since (runs stopped, rooms given back)
            self.mirror.retry_binds(self.clock())
            await self._load_config()
            now = self.clock()
            if self.mirror.spared_until is not None and now >= self.mirror.spared_until:
                self.mirror.dirty = True  # gangs spared after a refused eviction may be victims again
            if self.mirror.needs_compaction():
                self.mirror.dirty = True  # drop the jobs of gangs long gone
            if self.mirror.dirty:
                self.mirror.rebuild(now)
            while self.commands is not None and not self.commands.empty():
                await self._command(self.commands.get_nowait(), now)
            leader = self.is_leader
            self.metrics.set_leader(leader)
            if self.health is not None:
                self.health.set_role(leader)
            if leader and not self.paused:
                if self.mirror.dirty:
                    # marked while a command was awaited (leadership won meanwhile, a refused
                    # eviction): decide on the state derived afresh, not on the one it replaces
                    self.mirror.rebuild(self.clock())
                await self._tear_down()
                await self._schedule()
                # (not while the engine's state awaits a rebuild: after a called-off preemption it
                # takes the victims for stopped, and would tell the preemptor their GPUs are free)
                if (now - self._last_status >= self.status_interval and not self.mirror.dirty
                        and (self._status_round is None or self._status_round.done())):
                    # one round at a time: on a slow API server rounds would pile up, each
                    # writing the same conditions (and Events) again
                    self._last_status = now
                    self._status_round = self._spawn(self._write_status())
            self._publish()
        finally:
            self._busy -= 1

    async def _command(self, cmd: Command, now: float) -> None:
        """Carry out one operator command; whatever happens, its reply comes."""
        try:
            settle_reply(cmd, await self.apply_command(cmd))
        except CommandError as exc:
            self.state.audit.append(AuditEntry(now, cmd.actor, str(cmd.action), "?", f"rejected: {exc}"))
            settle_reply(cmd, error=exc)
        except Exception as exc:  # noqa: BLE001 - an API or transport failure is the command's, not the loop's
            self.metrics.controller_error(ErrorKind.COMMAND)
            log.warning("%s by %s failed: %s", cmd.action, cmd.actor, exc)
            self.state.audit.append(AuditEntry(now, cmd.actor, str(cmd.action), "?", f"failed: {exc}"))
            settle_reply(cmd, error=CommandError(f"{cmd.action}: {exc}"))

    def _drain(self) -> None:
        """Apply every queued delta to the mirror; one object that cannot be applied is logged,
        counted and skipped, never the end of the loop."""
        while not self.deltas.empty():
            source, kind, obj = self.deltas.get_nowait()
            try:
                self._apply(source, kind, obj)
            except Exception:  # one bad object must not stop scheduling
                self.metrics.controller_error(ErrorKind.WATCH)
                log.exception("could not apply %s %s of %s", kind, source, key_of(obj) if "metadata" in obj else "?")

    def _apply(self, source: Source, kind: DeltaType, obj: dict[str, Any]) -> None:
        mirror = self.mirror
        now = self.clock()
        deleted = kind == DeltaType.DELETED
        if source == Source.ASSIGNED_PODS:
            if (obj.get("spec") or {}).get("schedulerName") != SCHEDULER_NAME:
                mirror.holding_changed(key_of(obj), None if deleted else holding_of(obj))
        elif source == Source.PODS:
            key = key_of(obj)
            view = None if deleted else as_the_kubelet_counts(pod_view(obj, self._group_of(key, obj)), obj.get("spec") or {})
            if deleted:
                self._forget_depends(key)
            refused = self._refused(key, obj, view)
            mirror.pod_changed(view, key, now)
            if refused is not None and view is not None:
                self._kubelet_refused(view, *refused)
            elif view is not None and view.phase == Phase.RUNNING:
                self._refusal_waits.pop(view.gang, None)
            uid = obj.get("metadata", {}).get("uid", "")
            if deleted or (view is not None and not view.live):
                self._gone(uid)
            for old, (_, waiter_key, _) in list(self._gone_waiters.items()):
                if waiter_key == key and old != uid:
                    self._gone(old)  # a new pod under the name: the one we evicted is gone
            if deleted:
                self._written.pop(key, None)
                self._evict_tried.pop(uid, None)
        elif source == Source.NODES:
            name = obj["metadata"]["name"]
            mirror.node_changed(None if deleted else node_view(obj), name, now)
        elif source == Source.DECISIONS:
            if not deleted and shown_to_operators(obj):
                self._decision(obj)
        elif source == Source.NAMESPACES:
            mirror.namespace_changed(obj["metadata"]["name"], None if deleted else (obj["metadata"].get("labels") or {}))
        elif source == Source.OPERATOR_DECISIONS:
            self._load_decisions(None if deleted else obj)
        elif source == Source.BUDGETS:
            if deleted:
                self._budgets.pop(key_of(obj), None)
            else:
                self._budgets[key_of(obj)] = obj
        elif source == Source.OWNERS:
            owned = obj["object"]
            meta = owned.get("metadata") or {}
            for pod_key in sorted(self._dependents.get((obj["resource"], meta.get("namespace", ""), meta.get("name", "")), ())):
                pod = self._pods.cache.get(pod_key)
                before = self._groups.get(pod_key)
                if pod is None:
                    continue
                group = self._group_of(pod_key, pod)
                if group != before:  # its gang is another now, or its size, or its owner's annotations
                    mirror.pod_changed(as_the_kubelet_counts(pod_view(pod, group), pod.get("spec") or {}), pod_key, now)
        else:
            self._pending_config = (None if deleted else obj, obj)

    def _decision(self, event: dict[str, Any]) -> None:
        """One of the scheduler's Events, into this (console's) audit trail, in time order: one
        line per Event, as ``kubectl get events`` lists them; a repeat (the recorder counts it on
        the Event already there) updates that line's count instead of adding one."""
        meta = event.get("metadata") or {}
        uid = str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
        message = str(event.get("message", ""))
        count = event.get("count") if isinstance(event.get("count"), int) else 1
        seen = self._decisions_seen.get(uid)
        if seen is not None:
            seen.result = message if count <= 1 else f"{message} (x{count})"
            return
        about = event.get("involvedObject") or {}
        target = f"{about.get('namespace')}/{about.get('name')}" if about.get("namespace") else str(about.get("name"))
        when = parse_time(event.get("firstTimestamp") or event.get("eventTime") or meta.get("creationTimestamp"))
        entry = AuditEntry(when, "scheduler", str(event.get("reason")), target, message if count <= 1 else f"{message} (x{count})")
        self._decisions_seen[uid] = entry
        while len(self._decisions_seen) > DECISIONS_REMEMBERED:
            del self._decisions_seen[next(iter(self._decisions_seen))]  # the oldest first
        audit = self.state.audit
        if audit and audit[-1].time > when:
            bisect.insort(audit, entry, key=lambda e: e.time)
        else:
            audit.append(entry)

    def _group_of(self, key: str, pod: dict[str, Any]) -> GroupSpec:
        """The pod's gang from its labels and its owners, remembering which owners it read."""
        served = {k for k, informers in self._owner_informers.items() if any(i.served for i in informers)}
        group = infer_group(pod, self._owner, served=served)
        self._forget_depends(key)
        self._groups[key] = group
        self._depends[key] = group.depends
        for owner in group.depends:
            self._dependents.setdefault(owner, set()).add(key)
        return group

    def _forget_depends(self, key: str) -> None:
        self._groups.pop(key, None)
        for owner in self._depends.pop(key, ()):
            pods = self._dependents.get(owner)
            if pods is not None:
                pods.discard(key)
                if not pods:
                    del self._dependents[owner]

    def _owner(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        """An owner as its informer last saw it (the lookup of ``owners.infer_group``)."""
        for informer in self._owner_informers.get(resource, ()):
            obj = informer.cache.get(f"{namespace}/{name}")
            if obj is not None:
                return obj
        return None

    async def _load_config(self) -> None:
        """Parse the queue ConfigMap's newest version, if one arrived (off the event loop: a
        large or hostile document must not stall the watches and the lease renewals)."""
        if self._pending_config is None:
            return
        (obj, seen), self._pending_config = self._pending_config, None
        where = f"{self.namespace}/{QUEUES_CONFIGMAP}"
        # a good config has a queue (parse_queue_config refuses one without): none, none loaded yet
        loaded = bool(self.mirror.config.queues)
        keeping = "keeping the last good queue config" if loaded else NO_GOOD_CONFIG_YET
        if obj is None:
            self._config_error(ConfigRefusal(where, f"{where} {'was deleted' if loaded else 'does not exist'}; {keeping}"), seen)
            return
        text = (obj.get("data") or {}).get(QUEUES_CONFIG_KEY)
        if text is None:
            self._config_error(ConfigRefusal(where, f"{where} has no {QUEUES_CONFIG_KEY!r} key; {keeping}"), obj)
            return
        source = f"{where}[{QUEUES_CONFIG_KEY}]"
        try:
            config = await parse_queue_config_async(text, source, self.mirror.name)
        except ScenarioError as exc:
            self._config_error(ConfigRefusal.of_problems(where, f"invalid queue config in {source}; {keeping}", exc.problems), obj)
            return
        self.config_refusals.pop(QUEUES_CONFIGMAP, None)
        self.mirror.set_config(config, None)
        self.metrics.config_loaded(True)
        log.info("queue config loaded: %d queues", len(config.queues))

    def _load_decisions(self, obj: dict[str, Any] | None) -> None:
        """The operators' decisions as ConfigMap usher-decisions holds them now (deleted: none).
        One that cannot be read keeps the last good decisions (a typo must not release a hold)."""
        where = f"{self.namespace}/{DECISIONS_CONFIGMAP}"
        source = f"{where}[{DECISIONS_CONFIG_KEY}]"
        try:
            decisions = parse_decisions(None if obj is None else (obj.get("data") or {}).get(DECISIONS_CONFIG_KEY), source)
        except DecisionsError as exc:
            refusal = ConfigRefusal.of_problems(where, f"invalid operator decisions in {source}; keeping the last good ones", exc.problems)
            if self.config_refusals.get(DECISIONS_CONFIGMAP) == refusal:
                return
            self.config_refusals[DECISIONS_CONFIGMAP] = refusal
            log.error("%s", refusal.text())
            message = refusal.event_message()
            self.state.audit.append(AuditEntry(self.clock(), "controller", "config", DECISIONS_CONFIGMAP, message))
            if self.is_leader and obj is not None:
                self._spawn(self._event(ObjectRef.to(obj, "ConfigMap"), EventReason.INVALID_OPERATOR_DECISIONS, message, warning=True))
            return
        self.config_refusals.pop(DECISIONS_CONFIGMAP, None)
        self.mirror.set_decisions(decisions)

    def _config_error(self, refusal: ConfigRefusal, obj: dict[str, Any] | None) -> None:
        """Refuse the queue config (the last good one stays): the log, the metric, the audit
        trail and, from the leader, a Warning Event on the ConfigMap say every error."""
        text = refusal.text()
        if self.mirror.config_error == text:
            return
        self.config_refusals[QUEUES_CONFIGMAP] = refusal
        self.mirror.set_config(None, text)
        self.metrics.config_loaded(False)
        log.error("%s", text)
        message = refusal.event_message()
        self.state.audit.append(AuditEntry(self.clock(), "controller", "config", QUEUES_CONFIGMAP, message))
        if self.is_leader:
            ref = ObjectRef.to(obj, "ConfigMap") if obj is not None else ObjectRef("ConfigMap", QUEUES_CONFIGMAP, self.namespace)
            self._spawn(self._event(ref, EventReason.INVALID_QUEUE_CONFIG, message, warning=True))

    # -- scheduling -----------------------------------------------------------------------

    async def _schedule(self) -> None:
        engine = self.mirror.engine
        for job, pods in engine.shrink_for_waiting(self.clock()):
            gang = self.mirror.gang_of_job.get(job.id)
            views = [gang.pods[name] for name in sorted(pods) if gang is not None and name in gang.pods]
            why = f"{job.name} gives back a pod beyond its minimum to a job of higher priority"
            refusals = list(await asyncio.gather(*(self._eviction_refusal(v) for v in views)))
            if not any(refusals):
                refusals = self._over_budget(views)  # together they may exceed one budget
            for view, refused in zip(views, refusals):
                if refused is not None:
                    await self._event(_pod_ref(view), EventReason.EVICTION_BLOCKED, f"usher did not evict this pod ({why}): {refused}",
                                      warning=True)
            failed = next((r for r in refusals if r is not None), None)
            if failed is None:
                log.info("shrink %s: evicting %s to make room for a job of higher priority", job.name, ", ".join(v.name for v in views))
                failures = [f for f in await asyncio.gather(*(self._evict(v, why, EventReason.PREEMPTED) for v in views)) if f]
                failed = failures[0] if failures else None
            if failed is not None and gang is not None:
                # the engine gave those pods' GPUs away already: nothing is decided on that until
                # the next tick has derived its state from the cluster, where they still run
                log.warning("shrink %s called off: %s", job.name, failed)
                self.mirror.spare(gang, self.clock() + EVICTION_REFUSED_BACKOFF)
                return
        for _ in range(MAX_PASSES):
            now = self.clock()
            started = time.perf_counter()
            result = engine.cycle(now)
            self.metrics.observe_cycle(time.perf_counter() - started)
            self.stats.cycles += 1
            if self.stats.first_cycle_at is None:
                self.stats.first_cycle_at = time.perf_counter()
            if not result.decisions:
                break
            await self._carry_out(result.decisions, now)
            if self.mirror.dirty:
                # an eviction was refused: the engine's state takes the victims for stopped, so
                # nothing more is decided on it (a bind onto their nodes would overcommit them)
                # until the next tick has derived it again from the cluster
                return
            if not result.evicted:
                break
        self._grow(engine.grow(self.clock(), self.mirror.missing_pods))

    def _grow(self, result: CycleResult) -> None:
        """Bind the pods that elastic gangs grew by (one task per gang)."""
        by_job: dict[int, list[Decision]] = {}
        for d in result.decisions:
            by_job.setdefault(d.job.id, []).append(d)
        for job_id, decisions in by_job.items():
            gang = self.mirror.gang_of_job.get(job_id)
            if gang is not None and not gang.binding:
                placements = [p for d in decisions for p in d.placements]
                self._spawn(self._bind_extra(gang, decisions[0].job, placements))

    async def _bind_extra(self, gang: Gang, job: Job, placements: list[PodPlacement]) -> None:
        """Bind pods an elastic gang grew by; one that fails is given back, the gang runs on."""
        self._busy += 1
        # no call-off here: the grow is as good as sent, and the job no victim until it is done
        gang.binding = gang.binds_sent = job.settling = True
        failed: set[str] = set()
        try:
            pairs = self.mirror.pods_of(gang, placements)
            jobs = [(view, self.state.nodes[p.node_id].name, p.gpus) for view, p in pairs]
            if not await self._wait_for_evictions({node for _, node, _ in jobs}):
                failed = {view.name for view, _, _ in jobs}
            elif (withdrawn := self._withdrawn(gang, {node for _, node, _ in jobs})) is not None:
                log.info("grow %s called off: %s", gang.key, withdrawn)
                failed = {view.name for view, _, _ in jobs}
            else:
                results = await asyncio.gather(*(self._bind_one(gang, *j) for j in jobs))
                failed = {view.name for (view, _, _), error in zip(jobs, results) if error}
                self.stats.binds += len(jobs) - len(failed)
                bound = sorted({n for (v, n, _), e in zip(jobs, results) if not e}, key=natural_key)
                if bound:
                    log.info("grow %s: %d more pod(s) on %s", gang.key, len(jobs) - len(failed), ", ".join(bound))
        except Exception:
            log.exception("growing gang %s failed", gang.key)
            failed = {p.pod for p in placements}
        finally:
            if failed and job.current_run is not None and gang.job is job:
                self.mirror.engine.shrink(job, failed, self.clock())
            _binds_over(gang, job)
            self._busy -= 1
            self.mirror.sync(gang, self.clock())
            self.mirror.forget_if_empty(gang)

    async def _carry_out(self, decisions: list[Decision], now: float) -> None:
        evictions = [d for d in decisions if d.kind == DecisionKind.EVICT]
        binds = [d for d in decisions if d.kind == DecisionKind.BIND]
        if evictions and binds and not await self._evictions_allowed(evictions, now):
            why = "an eviction it needed is forbidden by a PodDisruptionBudget"
            self._call_off(binds, now, why)
            for d in evictions:  # a move called off: its mover runs on where it is
                room = self.state.give_back_room(d.job.id, now)
                if room is not None:
                    self.state.audit.append(AuditEntry(
                        now, "scheduler", AuditAction.KEEP_ROOM, d.job.name,
                        f"gave back the room kept on {_nodes_of(self.state, room.placements)}: the move was called off ({why})",
                    ))
            return
        for d in evictions:
            gang = self.mirror.gang_of_job.get(d.job.id)
            if gang is not None and gang.binding:
                # its bind task still waits for its own room: it must not bind now
                gang.called_off = f"preempted before its binds were sent ({self._why(d)})"
                if (call_off := self._call_offs.get(gang.key)) is not None:
                    call_off.set()
        blocked = False
        for d in evictions:
            if d.job.id in self.state.kept_rooms:
                self.metrics.job_moved(d.job.queue)
            elif d.reason == EndReason.PREEMPTED:
                self.metrics.job_preempted(d.job.queue)
            if d.reason is not None and d.reason != EndReason.FINISHED:
                self.metrics.job_evicted(d.reason)
            why = self._why(d)
            log.info("evict %s (%s): %s", d.job.name, why, _nodes_of(self.state, d.placements))
            gang = self.mirror.gang_of_job.get(d.job.id)
            if await self._evict_gang(gang, why):
                blocked = True
                assert gang is not None
                self.mirror.spare(gang, now + EVICTION_REFUSED_BACKOFF)
                break  # the preemption cannot finish: no more victims lose their work for it
        for d in binds:
            self.metrics.job_admitted(d.job.queue)
        if blocked:
            self._call_off(binds, now, "an eviction it needed was refused")
            return
        for d in binds:
            gang = self.mirror.gang_of_job.get(d.job.id)
            if gang is None:
                continue
            if gang.binding:
                # its bind task of before, called off, has not ended yet: two tasks must never
                # bind one gang (the old one would send its old decision), so this one is decided
                # again at the next tick
                self.mirror.engine.unbind(d.job, now, None)
                if d.returning is not None:
                    self.state.keep_room(d.returning, now)
                self._wake.set()
                continue
            self._spawn(self._bind_gang(gang, d))

    def _call_off(self, binds: list[Decision], now: float, why: str) -> None:
        """A cycle's evictions did not (all) happen: none of its binds is made (a moved job that
        was coming back keeps its room), and the next tick derives the engine's state from the
        cluster again, where the victims still run."""
        for d in binds:
            self.mirror.engine.unbind(d.job, now, why)
            if d.returning is not None:
                self.state.keep_room(d.returning, now)
        self.mirror.dirty = True

    def _why(self, d: Decision) -> str:
        """Why a job's pods are evicted, as their Events say it."""
        room = self.state.kept_rooms.get(d.job.id)
        if room is not None:  # consolidation: it starts again where room is kept for it
            return f"moved to make room for {d.by}: usher binds its pods again on {_nodes_of(self.state, room.placements)} when they come back"
        why = f"{d.reason}" + (f" for {d.by}" if d.by else "")
        if not d.job.comes_back:
            why += (
                "; nothing will make its pods anew (a bare pod, or a batch Job that counts them as failed and ends: "
                "a podFailurePolicy rule with action Ignore on DisruptionTarget keeps a preempted Job going)"
            )
        return why

    async def _evictions_allowed(self, evictions: list[Decision], now: float) -> bool:
        """Ask the API server, without evicting anything (``dryRun=All``), whether every pod the
        decisions evict may go now, so that a preemption or a move that a PodDisruptionBudget
        would stop halfway stops before it starts. A gang with a pod that may not go is spared
        for a while (``Mirror.spare``) and that pod gets an EvictionBlocked Event. True when all
        may go. A check that fails otherwise (an admission webhook, a pod under two budgets, which
        the API server answers 500, an API server away) counts as a refusal too: evicting the
        other victims would lose their work for a preemption that cannot finish."""
        checks = [
            (gang, view, d)
            for d in evictions
            if (gang := self.mirror.gang_of_job.get(d.job.id)) is not None
            for view in gang.bound()
            if not view.terminating
        ]
        refusals = list(await asyncio.gather(*(self._eviction_refusal(v) for _, v, _ in checks)))
        if not any(refusals):
            refusals = self._over_budget([view for _, view, _ in checks])
        refused = False
        for (gang, view, d), why in zip(checks, refusals):
            if why is None:
                continue
            refused = True
            self.stats.evictions_blocked += 1
            self.mirror.spare(gang, now + EVICTION_REFUSED_BACKOFF)
            log.warning("eviction of %s would be refused: %s", view.key, why)
            await self._event(_pod_ref(view), EventReason.EVICTION_BLOCKED,
                              f"usher did not evict this pod ({self._why(d)}): {why}", warning=True)
        return not refused

    async def _eviction_refusal(self, view: PodView) -> str | None:
        """Why the API server would not evict the pod now (a dry run), or None when it would
        (or the pod is gone already)."""
        if not self.may_write():
            return None
        try:
            await self.client.evict(view.namespace, view.name, view.uid, dry_run=True)
        except DisruptionBudgetBlocked as exc:
            return str(exc)
        except Exception as exc:  # noqa: BLE001 - any failure: the eviction would not go either
            return f"the eviction check failed: {exc}"
        return None

    def _over_budget(self, views: list[PodView]) -> list[str | None]:
        """For pods to be evicted together: why each may not go, by the PodDisruptionBudgets the
        informer holds (None: it may). A dry run asks about one pod at a time, so N pods under one
        budget that allows fewer than N all pass it; the evictions would then stop halfway. A
        budget's ``status.disruptionsAllowed`` is what the eviction API checks and lowers."""
        under: dict[str, list[int]] = {}
        for i, view in enumerate(views):
            pod = self._pods.cache.get(view.key) or {}
            if not _ready(pod):
                continue  # a pod not Ready takes nothing from a budget (the dry run judged it)
            labels = (pod.get("metadata") or {}).get("labels") or {}
            for key, pdb in self._budgets.items():
                if key.partition("/")[0] == view.namespace and selector_matches((pdb.get("spec") or {}).get("selector"), labels):
                    under.setdefault(key, []).append(i)
        out: list[str | None] = [None] * len(views)
        for key, members in under.items():
            try:
                allowed = int((self._budgets[key].get("status") or {}).get("disruptionsAllowed") or 0)
            except (TypeError, ValueError):
                allowed = 0
            if len(members) > allowed:
                for i in members:
                    out[i] = (
                        f"{len(members)} pods to evict together fall under PodDisruptionBudget {key}, "
                        f"which allows {allowed} disruption(s) now"
                    )
        return out

    def may_write(self) -> bool:
        """Whether this replica may change the cluster now: it schedules and, where replicas
        elect a leader, its lease is still valid (asked again right before every write)."""
        if not self.schedules:
            return False
        return self.elector is None or self.elector.holds()

    async def _bind_gang(self, gang: Gang, decision: Decision) -> None:
        """Bind every pod of an admitted gang, or none: any failure (an API error, a transport
        error, a timeout, a lost lease) evicts those that bound and requeues the gang."""
        self._busy += 1
        gang.binding, gang.binds_sent, gang.called_off = True, False, None
        call_off = self._call_offs[gang.key] = asyncio.Event()
        errors: list[str] = []
        jobs: list[tuple[PodView, str, list[int]]] = []
        try:
            pairs = self.mirror.pods_of(gang, decision.placements)
            jobs = [(view, self.state.nodes[p.node_id].name, p.gpus) for view, p in pairs]
            if not await self._wait_for_evictions({node for _, node, _ in jobs}, call_off):
                errors.append("the wait for evicted pods to leave its nodes was cut short")
            elif not self.may_write():
                errors.append("this replica no longer holds the leader lease")
            elif gang.called_off is None and (withdrawn := self._withdrawn(gang, {node for _, node, _ in jobs})) is not None:
                # nothing sent yet: the job goes back to its queue, and is decided again as it is now
                gang.called_off = withdrawn
                self.mirror.engine.unbind(decision.job, self.clock(), withdrawn)
            elif gang.called_off is None:
                # from here on nothing can call the binds off, and the job is no victim until
                # they are done: what they take cannot be evicted before it is seen bound
                gang.binds_sent = decision.job.settling = True
                errors = [e for e in await asyncio.gather(*(self._bind_one(gang, *job) for job in jobs)) if e]
        except Exception as exc:  # whatever broke, the gang must not stay half-bound
            log.exception("binding gang %s failed", gang.key)
            errors.append(f"{type(exc).__name__}: {exc}")
        try:
            if gang.called_off is not None and not gang.binds_sent:
                # preempted while it waited for its room: nothing was sent, nothing to undo; the
                # engine ended its run already, and the sync below queues its pods again
                log.info("bind %s called off before any was sent: %s", gang.key, gang.called_off)
            elif errors:
                self.stats.binds += len(jobs) - len(errors)
                await self._undo_binds(gang, jobs, errors)
            else:
                self.stats.binds += len(jobs)
                gang.bind_retry, gang.bind_error = (-math.inf, 0.0), None
                log.info("bind %s: %s", gang.key, ", ".join(sorted({n for _, n, _ in jobs}, key=natural_key)))
                for view, node, _ in jobs:
                    message = f"Successfully assigned {view.key} to {node} with gang {gang.title or gang.key}"
                    self._spawn(self._event(_pod_ref(view), EventReason.SCHEDULED, message))
                if decision.starts_work:
                    self.metrics.job_started(decision.job.queue, self.clock() - queued_since(decision.job))
        finally:
            if self._call_offs.get(gang.key) is call_off:
                del self._call_offs[gang.key]
            _binds_over(gang, decision.job)
            self._busy -= 1
            self.mirror.sync(gang, self.clock())
            self.mirror.forget_if_empty(gang)

    def _withdrawn(self, gang: Gang, nodes: set[str]) -> str | None:
        """Why binds decided for ``gang`` onto ``nodes`` must not be sent after all (None: they
        may): while they waited for their room (a victim's grace period), an operator held the job,
        or a node was cordoned (drained), failed or went. The operator was told it is done, and the
        mirror shows it: a bind now would undo the operator's command."""
        if self.mirror.held(gang):
            return "held by an operator while it waited for its room"
        for name in sorted(nodes, key=natural_key):
            view = self.mirror.nodes.get(name)
            if view is None:
                return f"node {name} went while it waited for its room"
            if view.unschedulable:
                return f"node {name} was cordoned while it waited for its room"
            if not view.ready:
                return f"node {name} stopped being ready while it waited for its room"
        return None

    async def _bind_one(self, gang: Gang, view: PodView, node: str, gpus: list[int]) -> str | None:
        async with self._bind_slots:
            if not self.may_write():
                return f"{view.name}: not bound, the leader lease was lost"
            try:
                await self.client.bind(view.namespace, view.name, node, {Annotation.GPUS: ",".join(map(str, gpus))}, view.uid,
                                       may_send=self.may_write)
            except NotSent:
                return f"{view.name}: not bound, the leader lease was lost"
            except Exception as exc:  # noqa: BLE001 - API, transport and decoding errors alike
                return f"{view.name}: {exc}"
            self.mirror.assume_bound(gang, view.name, node, gpus)
            return None

    async def _undo_binds(self, gang: Gang, jobs: list[tuple[PodView, str, list[int]]], errors: list[str]) -> None:
        self.stats.bind_errors += len(errors)
        for _ in errors:
            self.metrics.bind_failed()
        why = f"{len(errors)} of {len(jobs)} binds failed ({errors[0]})"
        if self.may_write():  # refused by the API server, not cut short by a lost lease: back off
            first = gang.bind_retry[1] == 0 and gang.bind_error is None
            wait = 0.0 if first else doubled_wait(gang.bind_retry[1], self.bind_retry, BIND_RETRY_MAX)
            gang.bind_retry = (self.monotonic() + wait, wait)
            gang.bind_error = f"by the API server: {errors[0]}"
        job = gang.job  # the gang's job now: a rebuild during the binds replaces the decision's
        current = (gang.pods.get(v.name) for v, _, _ in jobs)
        bound = [v for v in current if v is not None and v.bound and v.live]
        log.warning("rollback %s: %s; evicting the %d pod(s) that bound", gang.key, why, len(bound))
        if job is not None and job.current_run is not None:
            if bound:
                # the bound pods hold their nodes until they are gone: tear the gang down
                gang.teardown = f"rolled back: {why}"
            else:
                self.mirror.engine.unbind(job, self.clock(), why)
        refused = 0
        for view in bound:
            failure = await self._evict(view, f"rolling back gang {gang.title or gang.key}: {why}", EventReason.GANG_ROLLBACK)
            refused += failure is not None and BUDGET_REFUSED in failure
        if bound and refused == len(bound) and gang.teardown is not None:
            # a budget keeps every bound pod there: rather than half a gang for as long as it
            # refuses, bind the rest where they were to go (the run still holds that room)
            on = {v.name for v in bound}
            gang.to_bind = {v.name: (node, list(gpus)) for v, node, gpus in jobs if v.name not in on}
        self._wake.set()

    async def _complete(self, gang: Gang) -> bool:
        """Bind the pods a refused teardown left unbound (``Gang.to_bind``: a rollback's, where
        they were to go; a gang found partly bound, where ``Engine.complete`` placed them); True
        when the gang is whole again and runs on."""
        if not self.may_write():
            return False
        views = [(gang.pods.get(name), node, gpus) for name, (node, gpus) in sorted(gang.to_bind.items())]
        if any(v is None or not v.live or v.terminating or (v.bound and v.node != node) for v, node, _ in views):
            # a pod went, or is bound elsewhere: the teardown goes on; a completion placed anew
            # gives its room back, to be placed again at the next refusal
            job = gang.job
            if gang.completable and job is not None and job.current_run is not None:
                self.mirror.engine.shrink(job, set(gang.to_bind), self.clock(), note=False)
                gang.to_bind = {}
            return False
        todo = [(v, node, gpus) for v, node, gpus in views if v is not None and not v.bound]
        errors = [e for e in await asyncio.gather(*(self._bind_one(gang, v, node, gpus) for v, node, gpus in todo)) if e]
        if errors:
            log.warning("completing %s after its teardown was refused: %s", gang.key, errors[0])
            return False
        why = gang.teardown if gang.completable else "its first bind failed"
        log.info("bind %s: completed where its teardown was refused by a PodDisruptionBudget (%s)", gang.key, why)
        for v, node, _ in todo:
            self._spawn(self._event(_pod_ref(v), EventReason.SCHEDULED,
                                    f"Successfully assigned {v.key} to {node} with gang {gang.title or gang.key} "
                                    f"(completed: {why}, and a PodDisruptionBudget kept the rest of the gang running)"))
        gang.teardown = None
        gang.to_bind = {}
        gang.complete_at = (-math.inf, 0.0)
        gang.completable = gang.partial = False
        gang.bind_retry, gang.bind_error = (-math.inf, 0.0), None
        self.mirror.sync(gang, self.clock())
        return True

    def _plan_completion(self, gang: Gang) -> None:
        """Every eviction of a gang short of pods (found partly bound, or a member lost) was
        refused by a budget: place the pods it lacks beside those on nodes (``Engine.complete``),
        for ``_complete`` to bind."""
        job = gang.job
        if job is None or job.current_run is None:
            return
        short = min(gang.minimum or gang.required, gang.required) - len(gang.bound()) - len(gang.completed)
        missing = self.mirror.unplaced_members(gang)[:max(0, short)]  # an elastic gang: up to its minimum
        if len(missing) < short and len(gang.unbound()) > len(missing):
            # pods made since its job was taken in (a lost member's, made anew): take it in again with them
            why = gang.teardown
            if not self.mirror.take_in_again(gang, self.clock()) or gang.job is None:
                gang.completable = False  # whole as it is now: nothing to complete
                return
            gang.teardown, job = why, gang.job
            missing = self.mirror.unplaced_members(gang)[:max(0, short)]
        if len(missing) < short:
            log.info("teardown %s refused by a PodDisruptionBudget; waiting for its owner to make the %s it lacks",
                     gang.key, plural(short - len(missing), "pod"))
            return  # binding fewer would leave it short all the same
        placements = self.mirror.engine.complete(job, missing, self.clock())
        if not placements:
            log.info("teardown %s refused by a PodDisruptionBudget; no room yet to complete it instead", gang.key)
            return
        gang.to_bind = {p.pod: (self.state.nodes[p.node_id].name, list(p.gpus)) for p in placements}
        gang.complete_at = (-math.inf, 0.0)
        log.info("teardown %s refused by a PodDisruptionBudget: completing it instead, %s", gang.key,
                 ", ".join(f"{pod} on {node}" for pod, (node, _) in sorted(gang.to_bind.items())))
        self.mirror.sync(gang, self.clock())
        self._wake.set()

    def _next_wait(self, last: float | None) -> float:
        """The teardown's wait before its next try: ``eviction_retry``, doubled after each try
        up to ``EVICTION_RETRY_MAX``."""
        return doubled_wait(last or 0.0, self.eviction_retry, EVICTION_RETRY_MAX)

    async def _wait_for_evictions(self, nodes: set[str], call_off: asyncio.Event | None = None) -> bool:
        """Wait until the pods usher evicted from ``nodes`` are gone (they hold their GPUs
        through their grace period), or until ``call_off`` is set (the gang's binds were called
        off: its task ends at once, and the gang goes back to its queue); False if this replica
        stopped leading meanwhile."""
        while True:
            if call_off is not None and call_off.is_set():
                return self.may_write()
            waits = [ev for node, _, ev in self._gone_waiters.values() if node in nodes and not ev.is_set()]
            if not waits:
                return self.may_write()
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
            if not self.may_write():
                return False

    def _gone(self, uid: str) -> None:
        waiter = self._gone_waiters.pop(uid, None)
        if waiter is not None:
            waiter[2].set()

    # -- a kubelet's refusal ----------------------------------------------------------------

    def _refused(self, key: str, obj: dict[str, Any], view: PodView | None) -> tuple[Refusal, str] | None:
        """The kubelet's refusal of a pod this controller saw bound and live until now (not one
        found failed long ago, at a start), with usher's count of the refused resource on its
        node as it stood (the pod's own request taken out while its run still holds it)."""
        if view is None or view.phase != Phase.FAILED or not self.schedules:
            return None
        gang = self.mirror.gangs.get(self.mirror.pod_gang.get(key, ""))
        old = gang.pods.get(view.name) if gang is not None else None
        if old is None or old.uid != view.uid or not old.live:
            return None
        refusal = kubelet_refusal(obj)
        if refusal is None:
            return None
        state = self.state
        node = state.nodes[state.node_by_name[refusal.node]] if refusal.node in state.node_by_name else None
        job = gang.job if gang is not None else None
        counted = job is not None and job.current_run is not None and any(p.pod == view.name for p in job.current_run.placements)
        return refusal, usher_count(refusal, node, view, counted)

    def _kubelet_refused(self, view: PodView, refusal: Refusal, count: str) -> None:
        """A kubelet refused a pod usher bound: usher's view of that node is wrong. The gang backs
        off (a wait doubled at each refusal), nothing is placed on the node for a while (doubled
        too), the node's pods are read again to find what usher missed; counted, logged, and an
        Event on the Node says so."""
        self.metrics.bind_refused(refusal.label)
        moment = self.monotonic()
        for key in [k for k in self._refusal_waits if k not in self.mirror.gangs]:
            del self._refusal_waits[key]  # gangs gone since: their waits are of no more use
        gang = self.mirror.gangs.get(view.gang)
        if gang is not None:
            wait = doubled_wait(self._refusal_waits.get(gang.key, 0.0), self.bind_retry, BIND_RETRY_MAX)
            self._refusal_waits[gang.key] = wait
            gang.bind_retry = (moment + wait, wait)
            gang.bind_error = f"the kubelet on {refusal.node} refused pod {view.name}: {refusal.reason}"
        doubt = doubled_wait(self._doubt_waits.get(refusal.node, 0.0), self.node_doubt, BIND_RETRY_MAX)
        self._doubt_waits[refusal.node] = doubt
        self.mirror.doubt(refusal.node, moment + doubt)
        log.warning("the kubelet on %s refused pod %s (%s: %s); %s; usher places nothing there for %d s and reads its pods again",
                    refusal.node, refusal.pod, refusal.reason, refusal.message, count, doubt)
        self._spawn(self._reread_node(refusal, count, doubt))
        self._wake.set()

    async def _reread_node(self, refusal: Refusal, count: str, doubt: float) -> None:
        """Read the node and its unfinished pods from the API server and take in what the mirror
        missed or holds otherwise (a pod, the node's labels, taints or allocatable); when
        something was, usher's view is right again (the doubt is lifted), else the disagreement
        stands until the doubt is over. The Event on the Node says what was found."""
        node = refusal.node
        try:
            # a list, not a get: the controller's role lists and watches nodes, never reads one
            nodes = await self.client.list("/api/v1/nodes", field_selector=f"metadata.name={node}")
            listed = await self.client.list("/api/v1/pods", field_selector=f"spec.nodeName={node},{ASSIGNED_PODS}")
        except Exception as exc:  # noqa: BLE001 - the doubt stands; the watches go on
            self.metrics.controller_error(ErrorKind.WATCH)
            log.warning("could not read the pods of %s again: %s", node, exc)
            found = f"reading its pods again failed ({exc})"
        else:
            missed = self._reconcile_node(node, nodes.items[0] if nodes.items else None, listed.items)
            if missed:
                self.mirror.trust(node)
                self._doubt_waits.pop(node, None)
                found = f"usher's view had missed {', '.join(missed)}, and has taken {'them' if len(missed) > 1 else 'it'} in"
            else:
                found = f"usher's view of its pods matched the API server's, so it places nothing there for {doubt:.0f} s"
            log.warning("re-read the pods of %s after the kubelet refused %s: %s", node, refusal.pod, found)
        self._wake.set()
        if self.may_write():
            message = (f"The kubelet refused pod {refusal.pod}, which usher bound here ({refusal.reason}: {refusal.message}); "
                       f"{count}. {found[0].upper()}{found[1:]}.")
            await self._event(self._node_ref(node), EventReason.BIND_REFUSED_BY_KUBELET, message, warning=True)

    def _reconcile_node(self, node: str, obj: dict[str, Any] | None, pods: list[dict[str, Any]]) -> list[str]:
        """Take in the node ``obj`` (None: gone) if the mirror holds it otherwise, and the listed pods of
        ``node`` that the mirror lacks or holds otherwise (as the informers would have delivered
        them); the pods it held that the API server no longer lists there are logged (their
        watch events bring them). Returns what it missed."""
        mirror = self.mirror
        missed: list[str] = []
        old = mirror.nodes.get(node)
        if obj is None:
            if old is not None:
                missed.append("the node's deletion")
                self._apply(Source.NODES, DeltaType.DELETED, {"metadata": {"name": node}})
        else:
            new = node_view(obj)
            if old is None or (old.shape(), old.unschedulable, old.ready) != (new.shape(), new.unschedulable, new.ready):
                missed.append("the node's own labels, taints or allocatable")
                self._apply(Source.NODES, DeltaType.MODIFIED, obj)
        listed: set[str] = set()
        for obj in pods:
            key = key_of(obj)
            listed.add(key)
            if (obj.get("spec") or {}).get("schedulerName") == SCHEDULER_NAME:
                gang = mirror.gangs.get(mirror.pod_gang.get(key, ""))
                view = gang.pods.get(key.split("/", 1)[1]) if gang is not None else None
                if view is None or not view.live or view.node != node:
                    missed.append(key)
                    self._apply(Source.PODS, DeltaType.MODIFIED, obj)
            else:
                holding = holding_of(obj)
                if mirror.holdings.get(key) != holding:
                    missed.append(key)
                    self._apply(Source.ASSIGNED_PODS, DeltaType.MODIFIED, obj)
        stale = sorted(k for k, h in mirror.holdings.items() if h.node == node and k not in listed and k not in mirror.stranded)
        if stale:
            log.info("usher still counts %s on %s, which the API server no longer lists there", ", ".join(stale), node)
        return missed

    async def _evict_gang(self, gang: Gang | None, why: str, reason: EventReason = EventReason.PREEMPTED,
                          by_operator: bool = False) -> list[str]:
        """Evict every bound pod of a gang; what kept any of them (a PodDisruptionBudget, an
        error), empty when all went. Once one pod went, the teardown evicts the rest later."""
        if gang is None:
            return []
        pods = [v for v in gang.bound() if not v.terminating]
        for v in gang.bound():
            if v.terminating:
                # on its way out already (deleted by someone else, evicted before a failover): it
                # holds its GPUs through its grace period, so binds onto its node wait for it too
                self._gone_waiters.setdefault(v.uid, (v.node, v.key, asyncio.Event()))
        gang.teardown = gang.teardown or why
        # out of the engine's queue until its pods are gone: a later pass of this cycle must not
        # admit it again onto pods that are being deleted
        self.mirror.sync(gang, self.clock())
        failures = [f for f in await asyncio.gather(*(self._evict(v, why, reason, by_operator) for v in pods)) if f]
        if pods and len(failures) == len(pods):
            gang.teardown = None  # nothing was evicted: the gang is still whole and running
            self.mirror.sync(gang, self.clock())
        return failures

    async def _evict(self, view: PodView, why: str, reason: EventReason, by_operator: bool = False) -> str | None:
        """Evict one pod (None when it is evicted or already gone), or say what prevented it.
        ``by_operator``: an operator's command (drain, preempt), which any replica or console may
        carry out (the API server checks the operator's permission); usher's own decisions are
        the leader's alone."""
        key = view.key
        if not by_operator and not self.may_write():
            return f"{view.name}: this replica no longer holds the leader lease"
        self._gone_waiters.setdefault(view.uid, (view.node, key, asyncio.Event()))
        try:
            if not await self.client.evict(view.namespace, view.name, view.uid, may_send=None if by_operator else self.may_write):
                self._gone(view.uid)  # already gone
        except NotSent:
            self._gone(view.uid)
            return f"{view.name}: this replica no longer holds the leader lease"
        except DisruptionBudgetBlocked as exc:
            self._gone(view.uid)
            self.stats.evictions_blocked += 1
            log.warning("eviction of %s refused: %s", key, exc)
            await self._event(_pod_ref(view), EventReason.EVICTION_BLOCKED, f"usher could not evict this pod ({why}): {exc}", warning=True)
            return f"{view.name}: {BUDGET_REFUSED} ({exc})"
        except Exception as exc:  # noqa: BLE001 - retried by the teardown on a later tick
            self._gone(view.uid)
            self.metrics.controller_error(ErrorKind.EVICTION)
            log.warning("eviction of %s failed: %s", key, exc)
            await self._event(_pod_ref(view), EventReason.EVICTION_BLOCKED, f"usher could not evict this pod ({why}): {exc}", warning=True)
            return f"{view.name}: {exc}"
        self.stats.evictions += 1
        await self._event(_pod_ref(view), reason, f"Evicted by usher: {why}", warning=True)
        return None

    async def _tear_down(self) -> None:
        """Evict what is left of every gang being torn down (a lost member, a rollback, an
        eviction that failed before), so no gang stays half-running."""
        for gang in self.mirror.half_bound():
            # not ours to finish (we are not binding it): a leader before us died between its binds
            gang.teardown = f"found partly bound: {len(gang.bound())} of its {gang.required} pods on nodes"
            gang.completable = True
            self.mirror.sync(gang, self.clock())
        now = self.monotonic()
        for gang in self.mirror.teardowns():
            if gang.to_bind and now >= gang.complete_at[0]:
                wait = self._next_wait(gang.complete_at[1] or None)
                gang.complete_at = (now + wait, wait)
                if await self._complete(gang):
                    continue
            pods = [
                v
                for v in gang.bound()
                if not v.terminating
                and v.uid not in self._gone_waiters
                and now >= self._evict_tried.get(v.uid, (-math.inf, 0.0))[0]
            ]
            if pods:
                log.info("teardown %s (%s): evicting %s", gang.key, gang.teardown, ", ".join(v.name for v in pods))
            refused = 0
            for view in pods:
                tried = self._evict_tried.get(view.uid)
                wait = self._next_wait(tried[1] if tried is not None else None)
                self._evict_tried[view.uid] = (now + wait, wait)
                failure = await self._evict(view, f"gang {gang.title or gang.key} is being stopped: {gang.teardown}", EventReason.GANG_BROKEN)
                refused += failure is not None and BUDGET_REFUSED in failure
            if gang.to_bind or not pods or not refused == len(pods) == len(gang.bound()):
                continue  # not every pod on a node is kept there by a budget
            if not gang.completable and gang.unbound():
                # a member lost and the rest kept by a budget (one that allows no disruption with
                # a pod missing): the pods its owner made anew stand in for the lost ones
                # (``_plan_completion`` takes them in)
                gang.teardown = f"lost a member, and a PodDisruptionBudget keeps the other {plural(len(pods), 'pod')}"
                gang.completable = True
            if gang.completable:
                self._plan_completion(gang)

    # -- why pending ----------------------------------------------------------------------

    async def _write_status(self) -> None:
        """Bring every waiting pod's PodScheduled condition (and Events) up to date."""
        self._busy += 1
        try:
            now = self.clock()
            explained = explain_all(self.state, now, self.mirror.engine.policy.borrowing)
            writes = []
            for gang in self.mirror.waiting_gangs():
                reason, message = gang.reason, gang.message
                job = gang.job
                if reason is None and job is not None and job.id in explained:
                    ex = explained[job.id]
                    reason, message = ex.reason, ex.message
                if reason is None or message is None:
                    continue
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
            sem = asyncio.Semaphore(16)

            async def limited(write: tuple[PodView, PendingReason, str, str, str, bool]) -> None:
                # the write is started here, under the semaphore: a round cancelled meanwhile
                # (the controller stopping) leaves no write begun and never awaited
                async with sem:
                    await self._write_one(*write)

            await asyncio.gather(*(limited(w) for w in writes))
        finally:
            self._busy -= 1

    async def _write_one(
        self, view: PodView, reason: PendingReason, condition_reason: str, message: str, event_message: str, same_reason: bool
    ) -> None:
        if not self.may_write():
            return
        try:
            await self.client.patch_pod_condition(view.namespace, view.name, "PodScheduled", ConditionStatus.FALSE, condition_reason, message,
                                                  may_send=self.may_write)
        except Exception as exc:  # noqa: BLE001 - written again on the next round
            if not isinstance(exc, (NotFound, NotSent)):
                self.metrics.controller_error(ErrorKind.STATUS_WRITE)
                log.warning("could not update the condition of %s: %s", view.key, exc)
            return
        self._written[view.key] = _Written(str(reason), message, self.clock())
        self.stats.status_writes += 1
        if not same_reason:
            await self._event(_pod_ref(view), str(reason), event_message, warning=True)

    def _node_ref(self, name: str) -> ObjectRef:
        """An Event's reference to Node ``name``: with its uid as usher's watch last saw it, else
        with the node's name for a uid (the kubelet's own convention; ``kubectl describe node``
        looks for both)."""
        obj = self._nodes.cache.get(name) if self._nodes is not None else None
        return ObjectRef.to(obj, "Node") if obj is not None else ObjectRef("Node", name, uid=name)

    async def _event(self, ref: ObjectRef, reason: str, message: str, warning: bool = False) -> None:
        """Record an Event (best effort); a quarter of the client's connections at most."""
        try:
            async with self._event_slots:
                await self.events.record(ref, reason, message, EventType.WARNING if warning else EventType.NORMAL)
        except Exception as exc:  # noqa: BLE001 - an Event is best effort
            self.metrics.controller_error(ErrorKind.EVENT)
            log.warning("could not record an Event on %s %s: %s", ref.kind, ref.name, exc)

    # -- operator commands ----------------------------------------------------------------

    async def apply_command(self, cmd: Command) -> str:
        """Carry out an operator command through the API; the watch brings its effect back."""
        if self.readonly:
            raise CommandError("read-only: no changes are made to the cluster")
        now = self.clock()
        action = cmd.action
        if action in (Action.FAIL, Action.RECOVER):
            raise CommandError(f"{action} is a replay event; on a cluster, nodes fail by themselves")
        if action in (Action.CORDON, Action.UNCORDON, Action.DRAIN):
            text = await self._node_command(action, cmd.node)
            target = cmd.node or "?"
            ref = self._node_ref(target)
        elif action in (Action.APPROVE, Action.HOLD, Action.RELEASE, Action.PREEMPT):
            gang = self._gang_named(cmd.job)
            text = await self._job_command(action, gang, cmd.actor)
            target = gang.key
            first = next(iter(gang.pods.values()))
            ref = _pod_ref(first)
        else:
            text, edited = await self._set_quota(cmd)
            target = cmd.queue or "?"
            ref = ObjectRef.to(edited, "ConfigMap")
        self.state.audit.append(AuditEntry(now, cmd.actor, str(action), target, text))
        await self._event(ref, f"Usher{str(action)[0].upper()}{str(action)[1:]}", f"{cmd.actor}: {action} {target}: {text}")
        self._wake.set()
        return text

    def _gang_named(self, name: str | None) -> Gang:
        """The gang a command names: by its key, its job's name (``PyTorchJob ns/x``), or its
        key without the namespace."""
        gang = self.mirror.gangs.get(name or "")
        job_id = self.state.job_by_name.get(name or "")
        if gang is None and job_id is not None:
            gang = self.mirror.gang_of_job.get(job_id)
        if gang is None:
            gang = self._gang_titled(name or "")
        if gang is None:
            gang = next((g for g in self.mirror.gangs.values() if g.key.split("/", 1)[1] == name), None)
        if gang is None or not gang.pods:
            raise CommandError(f"unknown job {name!r}")
        return gang

    def _gang_titled(self, name: str) -> Gang | None:
        """The gang whose jobs are called ``name``, with an engine job or not."""
        return next((g for g in self.mirror.gangs.values() if (g.title or g.key) == name), None)

    async def _node_command(self, action: Action, node: str | None) -> str:
        if node is None or node not in self.mirror.nodes:
            raise CommandError(f"{action}: unknown node {node!r}")
        await self.client.set_unschedulable(node, action != Action.UNCORDON)
        if action != Action.DRAIN:
            return "cordoned" if action == Action.CORDON else "uncordoned"
        gangs = [g for g in self.mirror.gangs.values() if any(p.node == node for p in g.bound())]
        kept: list[str] = []
        stopped: list[Gang] = []
        for gang in gangs:
            kept += await self._evict_gang(gang, f"node {node} drained", by_operator=True)
            if gang.teardown is not None:
                stopped.append(gang)  # at least one of its pods is going: it is requeued whole
        text = f"drained; requeued {plural(len(stopped), 'job')}" + (f": {', '.join(g.title or g.key for g in stopped)}" if stopped else "")
        return text + (f"; could not evict {plural(len(kept), 'pod')}, the first: {kept[0]}" if kept else "")

    async def _job_command(self, action: Action, gang: Gang, actor: str) -> str:
        if action == Action.PREEMPT:
            if not gang.bound():
                return "not running; nothing to preempt"
            kept = await self._evict_gang(gang, "preempted by an operator", by_operator=True)
            if kept and gang.teardown is None:
                raise CommandError(f"preempt: no pod of {gang.title or gang.key} could be evicted: {kept[0]}")
            return "preempted and requeued" + (f"; {plural(len(kept), 'pod')} still to evict ({kept[0]})" if kept else "")
        if action == Action.RELEASE and not self.mirror.held(gang):
            return "not held; nothing to release"
        where = f"{self.namespace}/{DECISIONS_CONFIGMAP}[{DECISIONS_CONFIG_KEY}]"
        when = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        known = set(self.mirror.gangs)

        async def edit(text: str) -> str:
            try:
                decisions = parse_decisions(text, where)
            except DecisionsError as exc:
                raise CommandError(f"{action}: {exc}; fix it first (kubectl edit configmap -n {self.namespace} {DECISIONS_CONFIGMAP})") from None
            return format_decisions(decide(decisions, gang.key, action, actor, when, known))

        await self._edit_configmap(DECISIONS_CONFIGMAP, DECISIONS_CONFIG_KEY, edit, str(action))
        return {Action.APPROVE: "approved", Action.HOLD: "held", Action.RELEASE: "released"}[action]

    async def _edit_configmap(self, name: str, key: str, edit: Callable[[str], Awaitable[str]], what: str) -> dict[str, Any]:
        """Replace ``key`` of ConfigMap ``name`` (in usher's namespace) with ``edit`` of its text,
        with optimistic concurrency: a conflicting writer means read again, edit again, retry.
        Returns the ConfigMap as written."""
        path = f"/api/v1/namespaces/{self.namespace}/configmaps/{name}"
        for attempt in range(4):
            try:
                obj = await self.client.get(path)
            except ApiError as exc:
                if exc.code == 404:
                    raise CommandError(f"{what}: ConfigMap {self.namespace}/{name} does not exist; an admin creates it "
                                       "once (deploy/ ships it), since operators may only update it") from None
                raise CommandError(f"{what}: cannot read {self.namespace}/{name}: {exc}") from None
            obj.setdefault("data", {})
            obj["data"] = obj["data"] or {}
            obj["data"][key] = await edit(obj["data"].get(key, ""))
            try:
                return await self.client.replace(path, obj)
            except ApiError as exc:
                if exc.code == 409 and attempt < 3:
                    await asyncio.sleep(random.uniform(0.05, 0.2))
                    continue
                raise CommandError(f"{what}: {exc}") from None
        raise CommandError(f"{what}: {self.namespace}/{name} kept changing under us; try again")

    async def _set_quota(self, cmd: Command) -> tuple[str, dict[str, Any]]:
        """Merge new limits into the queues ConfigMap; what was set, in words, and the ConfigMap
        as written."""
        limits = {
            field_name: {res: None if v is None else _spec_amount(res, v) for res, v in values.items()}
            for field_name, values in zip(LIMIT_FIELDS, (cmd.quota, cmd.borrowing_limit, cmd.lending_limit))
            if values
        }

        async def edit(text: str) -> str:
            try:
                new_text = edit_queue_limits(text, cmd.queue or "", limits)
            except ValueError as exc:
                raise CommandError(f"setQuota: {exc}; fix {self.namespace}/{QUEUES_CONFIGMAP} first") from None
            if new_text is None:
                raise CommandError(f"setQuota: unknown queue {cmd.queue!r}")
            try:
                await parse_queue_config_async(new_text, "the edited queue config")
            except ScenarioError as exc:
                raise CommandError(f"setQuota: the result would be invalid: {exc}") from None
            return new_text

        edited = await self._edit_configmap(QUEUES_CONFIGMAP, QUEUES_CONFIG_KEY, edit, "setQuota")
        return limits_change(dict(zip(LIMIT_FIELDS, (cmd.quota, cmd.borrowing_limit, cmd.lending_limit)))), edited

    # -- metrics and idleness --------------------------------------------------------------

    def _update_gauges(self) -> None:
        waiting = [g.reason for g in self.mirror.gangs.values() if g.reason is not None and g.unbound()]
        self.metrics.observe_state(self.state, self.clock(), waiting)

    @property
    def idle(self) -> bool:
        """Nothing queued, nothing in flight: what the tests' lockstep harness waits for."""
        return (self.synced.is_set() and self.deltas.empty() and self._busy == 0 and not self._wake.is_set()
                and not self.mirror.backing_off)

    async def wait_idle(self, settle: int = 3) -> None:
        quiet = 0
        while quiet < settle:
            await asyncio.sleep(0.01)
            quiet = quiet + 1 if self.idle else 0


#: the Events that are the scheduler's decisions (what a console shows in its Events view)
DECISION_REASONS = frozenset({
    EventReason.SCHEDULED, EventReason.PREEMPTED, EventReason.GANG_ROLLBACK, EventReason.GANG_BROKEN, EventReason.EVICTION_BLOCKED,
})
#: Warning Events a console leaves out: a refused ConfigMap of usher's, which the console's own
#: controller reads and refuses too, and says so in its own trail (one line, not two)
OWN_CONFIG_REASONS = frozenset({EventReason.INVALID_QUEUE_CONFIG, EventReason.INVALID_OPERATOR_DECISIONS})
#: the Events a console remembers having shown (by uid), to count a repeat on its line
DECISIONS_REMEMBERED = 10_000


def shown_to_operators(event: dict[str, Any]) -> bool:
    """Whether a console's Events view shows one of usher's Events: the scheduler's decisions,
    and every Warning (why a pod waits, as its reason changes; a bind the kubelet refused; an
    eviction a budget blocked), as ``kubectl get events`` lists them."""
    reason = event.get("reason")
    if reason in DECISION_REASONS:
        return True
    return event.get("type") == EventType.WARNING and reason not in OWN_CONFIG_REASONS

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


def pod_scheduled_condition(reason: PendingReason, message: str) -> tuple[str, str]:
    """The reason and message of a waiting pod's ``PodScheduled=False`` condition; the message
    always starts with usher's own reason."""
    return (UNSCHEDULABLE if reason in CAPACITY_REASONS else str(reason)), f"{reason}: {message}"


def _binds_over(gang: Gang, job: Job) -> None:
    """A bind task of the gang's ended: nothing of it is in flight any more, for the job it bound
    and for the job a rebuild made for the gang meanwhile."""
    gang.binding, gang.binds_sent, gang.called_off = False, False, None
    job.settling = False
    if gang.job is not None:
        gang.job.settling = False


def _same_but_numbers(a: str, b: str) -> bool:
    """Whether two messages say the same thing with other figures (such an update can wait for
    ``MESSAGE_REFRESH``; one that says something else cannot)."""
    return re.sub(r"\d+(\.\d+)?", "#", a) == re.sub(r"\d+(\.\d+)?", "#", b)


def _ready(pod: dict[str, Any]) -> bool:
    """Running and Ready: a pod whose eviction a PodDisruptionBudget counts against it."""
    status = pod.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if isinstance(c, dict) and c.get("type") == "Ready"), None)
    return status.get("phase") == "Running" and ready is not None and ready.get("status") == "True"


def _nodes_of(state: Any, placements: list[Any]) -> str:
    return ", ".join(sorted({state.nodes[p.node_id].name for p in placements}, key=natural_key)) or "no nodes"


def _pod_ref(view: PodView) -> ObjectRef:
    return ObjectRef("Pod", view.name, view.namespace, view.uid, resource_version=view.resource_version)


def _spec_amount(resource: str, value: float) -> Any:
    """A state-unit amount as a person writes it in the queue config: GPUs as a number (``80``,
    ``0.5``), CPU and memory as exact Kubernetes quantities (``96``, ``500m``, ``512Gi``)."""
    if resource == QueueResource.GPU:
        return value / MILLI if value % MILLI else int(value // MILLI)
    return figure(resource, value)
