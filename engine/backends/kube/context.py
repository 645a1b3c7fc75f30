"""What the kube controller's parts share, passed to each explicitly.

``KubeController`` is a façade over parts cut along kube-scheduler's seams (intake, the cycle
driver, the binder, the evictor, the teardown, the status writer, operator commands, kubelet
refusals). They share no privates: each gets the ``Context`` (the client, the mirror, the
metrics, the knobs a test turns, the leader check, the task spawner, the wake-up) and the other
parts it calls, and nothing else. ``Departures`` is the one register three of them meet at: the
pods usher evicted and has not yet seen go, which the evictor fills, intake empties and the
binder's PreBind waits on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ...state import PodPlacement
from .client import KubeClient, ObjectRef
from .informer import DeltaType
from .lease import LeaderElector
from .metrics import ControllerMetrics
from .mirror import Mirror
from .objects import PodView, natural_key

log = logging.getLogger("usher.controller")

#: binds in flight at most (and no more than the client's connections that Events leave, so
#: that the leader check right before each bind is not followed by a wait for a connection)
BIND_CONCURRENCY = 64
#: the share of the client's connections Events may take, so that binds keep the rest
EVENT_SHARE = 0.25
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
#: the pods that hold capacity on their node: assigned and not finished (kube-scheduler's view)
ASSIGNED_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"


def doubled_wait(last: float, base: float, cap: float) -> float:
    """The next wait of a retry that keeps failing: ``base`` at first (``last`` 0), then twice
    the last, never more than ``cap`` (nor less than ``base``)."""
    return min(max(2 * last, base), max(cap, base))


class Source(StrEnum):
    """Where a delta came from: which informer."""

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
    #: claims, volumes, storage classes, CSIStorageCapacities and CSINodes (``volumes``)
    STORAGE = "storage"
    #: ResourceClaims, ResourceClaimTemplates, DeviceClasses and ResourceSlices (``dra``)
    DRA = "dra"


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
    #: a gang's claims could not all be bound: no pod of it was bound (``volumes_prebind``)
    VOLUME_BINDING_FAILED = "FailedVolumeBinding"
    #: a gang's ResourceClaims could not be allocated and reserved before its pods bound
    CLAIM_ALLOCATION_FAILED = "FailedResourceClaimAllocation"
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


class Departures:
    """Pods usher evicted and has not yet seen go, by uid: their node, their key, and an event set
    when they are gone. They hold their GPUs through their grace period, so binds onto their
    nodes wait for them (``Binder.prebind``)."""

    def __init__(self) -> None:
        self._waiting: dict[str, tuple[str | None, str, asyncio.Event]] = {}

    def expect(self, view: PodView) -> None:
        """An eviction of ``view`` is asked for (or it is going already): wait for it to go."""
        self._waiting.setdefault(view.uid, (view.node, view.key, asyncio.Event()))

    def gone(self, uid: str) -> None:
        """The pod ``uid`` is gone (or its eviction was not made): nothing waits for it any more."""
        waiter = self._waiting.pop(uid, None)
        if waiter is not None:
            waiter[2].set()

    def seen(self, key: str, uid: str) -> None:
        """A pod under the name ``key`` was seen with ``uid``: an evicted one of that name with
        another uid is gone (a new pod took its name)."""
        for old, (_, waiter_key, _) in list(self._waiting.items()):
            if waiter_key == key and old != uid:
                self.gone(old)

    def awaited(self, uid: str) -> bool:
        return uid in self._waiting

    def on(self, nodes: set[str]) -> list[asyncio.Event]:
        """The events of the evicted pods on ``nodes`` that are not gone yet."""
        return [ev for node, _, ev in self._waiting.values() if node in nodes and not ev.is_set()]


@dataclass(eq=False)
class Context:
    """The controller's shared objects and knobs (a test turns ``monotonic``, ``bind_retry``,
    ``eviction_retry`` and ``node_doubt`` through the façade)."""

    client: KubeClient
    mirror: Mirror
    metrics: ControllerMetrics
    namespace: str
    identity: str
    clock: Callable[[], float]
    #: False for the console: it mirrors the cluster and sends commands, never binds
    schedules: bool
    readonly: bool
    elector: LeaderElector | None = None
    stats: Stats = field(default_factory=Stats)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    deltas: asyncio.Queue[tuple[Source, DeltaType, dict[str, Any]]] = field(default_factory=asyncio.Queue)
    departures: Departures = field(default_factory=Departures)
    #: set at every storage informer event (the binder's volume step waits on it)
    storage_changed: asyncio.Event = field(default_factory=asyncio.Event)
    #: the clock of the teardown's and the binds' retries (a test drives it)
    monotonic: Callable[[], float] = time.monotonic
    bind_retry: float = BIND_RETRY
    eviction_retry: float = EVICTION_RETRY
    node_doubt: float = NODE_DOUBT
    #: work in flight (a tick, a bind task, a status round): what ``KubeController.idle`` counts
    busy: int = 0
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)

    def may_write(self) -> bool:
        """Whether this replica may change the cluster now: it schedules and, where replicas
        elect a leader, its lease is still valid (asked again right before every write)."""
        if not self.schedules:
            return False
        return self.elector is None or self.elector.holds()

    @property
    def is_leader(self) -> bool:
        if not self.schedules:
            return False
        return self.elector is None or self.elector.is_leader

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``coro`` as a task the controller cancels when it stops."""
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task failed: %r", task.exception(), exc_info=task.exception())


def pod_ref(view: PodView) -> ObjectRef:
    """An Event's reference to the pod ``view``."""
    return ObjectRef("Pod", view.name, view.namespace, view.uid, resource_version=view.resource_version)


def nodes_of(state: Any, placements: list[PodPlacement]) -> str:
    """The nodes of ``placements``, by name, in natural order."""
    return ", ".join(sorted({state.nodes[p.node_id].name for p in placements}, key=natural_key)) or "no nodes"
