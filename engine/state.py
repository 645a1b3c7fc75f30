"""The engine's state: plain slotted records of nodes, jobs and queues, and the capacity indexes.

Pydantic stays at the boundary (scenario files); here everything is a ``@dataclass(slots=True)``
with integer units so the hot path does no parsing and no float drift:

- GPU amounts are *milli-GPUs* (``1000`` = one whole GPU, ``460`` = a 0.46 share);
- CPU is millicores, memory bytes; a node that does not state them has ``UNLIMITED``.

``ClusterState`` owns the indexes that make placement cheap at 5,000 nodes: for every GPU model,
the schedulable nodes bucketed by how many *whole* GPUs they have free, the nodes with a partly
used GPU, and per topology domain the whole GPUs free. Every change of capacity goes through
``ClusterState.allocate`` / ``ClusterState.release`` so the indexes can never drift.
"""

from __future__ import annotations

from bisect import insort
from collections import deque
from dataclasses import dataclass, field
from itertools import count
from operator import attrgetter
from typing import TYPE_CHECKING

from sortedcontainers import SortedList

from .enums import (
    Approval,
    BorrowWithinCohort,
    EndReason,
    JobState,
    PendingReason,
    ReclaimWithinCohort,
    TopologyMode,
    WithinQueue,
)

MILLI = 1000
UNLIMITED = 1 << 62
HOSTNAME_LEVEL = "kubernetes.io/hostname"
INF = float("inf")

if TYPE_CHECKING:
    from .plans import Plan
    from .policy.fragmentation import WorkloadProfile

#: stamps that order every write of a pending reason, a job's own or its ``ReasonCell``'s: the
#: later one is the reason (a process-wide counter, so stamps from any state compare; a state
#: unpickled from another process moves it past its own stamps)
reason_stamp = count(1).__next__

_WHOLE_FREE = attrgetter("whole_free")

#: finished runs before the start-time planner trusts their ratio to the estimates
RATIOS_TO_LEARN = 16


def _clock_past(stamp: int) -> None:
    global reason_stamp
    if reason_stamp() <= stamp:
        reason_stamp = count(stamp + 1).__next__


class OperatorWait:
    """Index into ``ReasonCell.counts``: a pending job waits on no operator, is held, or
    awaits approval (counted whatever its queue's mode; only a manual queue makes it wait)."""

    NONE = 0
    HELD = 1
    UNAPPROVED = 2


def operator_wait(job: Job) -> int:
    if job.held:
        return OperatorWait.HELD
    return OperatorWait.NONE if job.approved else OperatorWait.UNAPPROVED


def signature_of(job: Job) -> tuple:
    """What makes jobs alike for a cycle: queue, priority, minCount and pod groups."""
    return (job.queue, job.priority, job.min_count, job.groups)

#: A node's shape: GPU model, free CPU, free milli-GPUs sorted high to low, free memory in
#: ``MEMORY_UNIT`` rounded down.
Shape = tuple[str, int, tuple[int, ...], int]
#: Bytes per unit of free memory in a node's shape (MiB; ``policy.fragmentation.MEMORY_UNIT``).
MEMORY_UNIT = 1 << 20
#: A resource vector: (gpu milli, cpu millicores, memory bytes).
Vec = tuple[int, int, int]
#: what a pod asks of its node beyond GPUs, CPU and memory, as (resource name, amount) pairs
#: sorted by name: a cluster's extended resources (``rdma/ib``), hugepages, ephemeral storage
#: and the pod count; a node offers only those it lists (``Node.extra``), none of the others
Extras = tuple[tuple[str, int], ...]
#: the extra every pod on a cluster takes one of: a node's pod limit (its ``pods`` allocatable)
PODS = "pods"
#: extras named so are host ports (``hostport:TCP/29500``): a node has one of each until a pod
#: takes it, without listing them
HOST_PORT = "hostport:"


def extra_offered(extra: dict[str, int], name: str) -> int:
    """How much of ``name`` a node with extras ``extra`` (``Node.extra`` or ``extra_free``) has:
    what it lists; an unlisted host port is free, any other unlisted resource it has none of."""
    return extra.get(name, 1 if name.startswith(HOST_PORT) else 0)
#: A quota vector: the same resources; ``inf`` where a queue sets no limit.
QuotaVec = tuple[float, float, float]
RESOURCE_NAMES = ("gpu", "cpu", "memory")
ZERO: Vec = (0, 0, 0)


def vadd(a: Vec, b: Vec) -> Vec:
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2])


def vsub(a: Vec, b: Vec) -> Vec:
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2])


@dataclass(slots=True)
class Node:
    """One node: its GPUs (free milli per index), NVLink islands, CPU and memory."""

    id: int
    name: str
    labels: dict[str, str]
    gpu_model: str
    gpu_memory: int
    gpu_count: int
    islands: list[list[int]]
    cpu: int
    memory: int
    gpu_free: list[int] = field(default_factory=list)
    cpu_free: int = 0
    mem_free: int = 0
    whole_free: int = 0
    cordoned: bool = False
    failed: bool = False
    #: domain id per topology level (index into ClusterState.domains[level])
    domains: list[int] = field(default_factory=list)
    #: job ids with at least one pod here
    jobs: set[int] = field(default_factory=set)
    #: GPU indices out of service (the node agent reports them unhealthy): never free, and not
    #: counted as capacity; set before ``ClusterState.add_node``
    out_of_service: frozenset[int] = frozenset()
    #: taints as generic ``(key, value, effect)`` tuples; the backend decides what they mean
    #: for a pod (``PodGroup.eligible``), the engine only carries them
    taints: tuple[tuple[str, str, str], ...] = ()
    #: what it offers of the resources pods ask beyond GPUs, CPU and memory (``Extras``); set
    #: before ``ClusterState.add_node``
    extra: dict[str, int] = field(default_factory=dict)
    #: what is left of ``extra``
    extra_free: dict[str, int] = field(default_factory=dict)

    @property
    def schedulable(self) -> bool:
        return not (self.cordoned or self.failed)

    @property
    def gpus_in_service(self) -> int:
        return self.gpu_count - len(self.out_of_service)

    def has_partial(self) -> bool:
        return any(0 < f < MILLI for f in self.gpu_free)


def node_shape(node: Node) -> Shape:
    """What fragmentation scoring sees of a node; nodes of one shape score alike."""
    return (node.gpu_model, node.cpu_free, tuple(sorted(node.gpu_free, reverse=True)), node.mem_free // MEMORY_UNIT)


@dataclass(slots=True)
class Domain:
    """One topology domain (a block, a rack, a host) at one level."""

    level: int
    name: str
    node_ids: list[int]
    parent: int | None
    whole_free: int = 0
    gpu_total: int = 0
    #: schedulable nodes of the domain by whole GPUs free: ``free_hist[k]`` nodes have k free
    free_hist: list[int] = field(default_factory=list)
    #: False for the nodes that lack the level's label (``(no usher/rack)``): they are in no
    #: domain of that level, so a gang that requires (or prefers) one is never placed among them
    labelled: bool = True


@dataclass(slots=True, frozen=True)
class PodGroup:
    """Identical pods of a job (a spec ``pods`` entry)."""

    name: str
    count: int
    gpu_milli: int
    cpu: int
    memory: int
    models: frozenset[str] | None
    topology_mode: TopologyMode | None = None
    topology_level: int | None = None
    #: node ids the pods may go on (a backend's node constraints: selectors, taints); None = any
    eligible: frozenset[int] | None = None
    #: node ids in preference tiers, best first: a pod goes to the first tier with room, then
    #: anywhere it is eligible (nodes in no tier are the least preferred); empty = no preference
    preferred: tuple[frozenset[int], ...] = ()
    #: why the nodes outside ``eligible`` are excluded, in words, for "why pending" messages
    exclusions: str | None = field(default=None, compare=False)
    #: what each pod asks beyond GPUs, CPU and memory (``Extras``)
    extra: Extras = ()

    @property
    def whole_gpus(self) -> int:
        """Whole GPUs per pod; 0 for a shared (fractional) or CPU-only pod."""
        return self.gpu_milli // MILLI if self.gpu_milli >= MILLI else 0

    @property
    def share(self) -> int:
        """Milli-GPU share per pod when the pod shares a GPU, else 0."""
        return self.gpu_milli if 0 < self.gpu_milli < MILLI else 0


@dataclass(slots=True)
class PodPlacement:
    """Where one pod runs: node, GPU indices and, for a shared GPU, the share it holds."""

    pod: str
    node_id: int
    gpus: list[int]
    share: int  # milli per GPU listed when shared; 0 for whole GPUs
    cpu: int
    memory: int
    #: when the pod was bound, if later than its run's start (pod-by-pod admission only)
    bound_at: float | None = None
    #: what it takes beyond GPUs, CPU and memory (``Extras``)
    extra: Extras = ()

    @property
    def gpu_milli(self) -> int:
        return self.share if self.share else MILLI * len(self.gpus)


@dataclass(slots=True)
class Run:
    """An interval in which a job held resources."""

    start: float
    placements: list[PodPlacement]
    end: float | None = None
    end_reason: EndReason | None = None
    by: str | None = None
    #: when the job began to work: at ``start`` for a gang; with pod-by-pod admission, when
    #: the last pod it needs was bound (None while it holds some pods and waits for the rest)
    work_start: float | None = None

    @property
    def working(self) -> bool:
        return self.work_start is not None


@dataclass(slots=True)
class Job:
    """A job (possibly a gang) and its life so far."""

    id: int
    name: str
    queue: str
    submit: float
    priority: int
    duration: float | None
    estimate: float | None
    #: whether it may be preempted, as asked; "not preemptible" is granted only for what its
    #: queue owns (``shielded``)
    preemptible: bool
    checkpoint_every: float | None
    min_count: int
    groups: tuple[PodGroup, ...]
    #: never a victim nor a mover for now, whatever it asked (on a cluster: an eviction of its
    #: pods was refused by a PodDisruptionBudget a moment ago)
    spared: bool = False
    #: while running: kept from preemption and moves. Set when it starts (``mark_running``): it
    #: is spared, or it asked not to be preemptible and its queue lent it nothing, since a job
    #: that borrowed runs on quota its lender may always take back (as in Kueue)
    shielded: bool = False
    #: whether the job may be moved (stopped and started again elsewhere) to make room for a
    #: gang: on a cluster only when something creates its pods again once they are evicted
    movable: bool = True
    #: whether its pods are made anew after an eviction (on a cluster: a controller that would
    #: do so owns them); preemption takes the jobs that come back first, least harm first
    comes_back: bool = True
    #: whether it may evict others to start (preemption, consolidation, taking back what elastic
    #: jobs grew by); False (a Kubernetes pod's ``preemptionPolicy: Never``): it only goes ahead
    #: of lower priorities in its queue
    preempts: bool = True
    #: its start is still being carried out (on a cluster: its binds are on their way): neither
    #: a victim nor a mover until it is done, since what is not seen started cannot be stopped
    settling: bool = False
    #: the full gang's request and the request of its smallest admissible gang
    request: Vec = ZERO
    state: JobState = JobState.PENDING
    submitted: bool = False
    #: approved, held: change them through ``ClusterState.set_operator_flags`` (its queue's
    #: reason cell counts them)
    approved: bool = False
    held: bool = False
    #: work still to do (seconds of run time); None = runs until the end
    remaining: float | None = None
    #: work saved by checkpoints over earlier runs (reduces the estimate too)
    saved: float = 0.0
    runs: list[Run] = field(default_factory=list)
    #: the request charged to the queue while running (full or minCount gang)
    charged: Vec = ZERO
    admitted_seq: int = 0
    #: why it waits, as last written for this job alone (read ``pending_reason``)
    _reason: PendingReason | None = field(default=None, repr=False)
    #: when ``_reason`` was written (``reason_stamp``)
    _reason_at: int = field(default=0, repr=False, compare=False)
    #: while pending: the cell of the jobs alike in its queue, which a cycle may write for them
    #: all at once (``ReasonCell``); None otherwise
    _cell: ReasonCell | None = field(default=None, repr=False, compare=False)
    seq: int = 0
    #: when the current run should end by the estimate (inf when unknown); set on admission
    est_end: float = INF

    @property
    def pending_reason(self) -> PendingReason | None:
        """Why the job waits: its own reason, or its cell's when a cycle wrote that later."""
        cell = self._cell
        if cell is not None and cell.at > self._reason_at:
            return cell.reason
        return self._reason

    @pending_reason.setter
    def pending_reason(self, reason: PendingReason | None) -> None:
        self._reason = reason
        self._reason_at = reason_stamp()

    @property
    def total_pods(self) -> int:
        return sum(g.count for g in self.groups)

    @property
    def current_run(self) -> Run | None:
        if self.runs and self.runs[-1].end is None:
            return self.runs[-1]
        return None

    @property
    def incomplete_gang(self) -> bool:
        """Holds some of its pods and waits for the rest (pod-by-pod admission only)."""
        run = self.current_run
        return run is not None and run.work_start is None

    @property
    def first_work_start(self) -> float | None:
        """When the job first began to work (the end of its wait), if it has."""
        return next((r.work_start for r in self.runs if r.work_start is not None), None)

    def order_key(self) -> tuple[int, float, int]:
        """Ordering within a queue: priority, then submit time, then file order."""
        return (-self.priority, self.submit, self.seq)

    def estimated_end(self, now: float) -> float:
        """When the current run should end by the user's estimate (not before now); inf when unknown."""
        return max(now, self.est_end)

    def estimated_runtime(self) -> float:
        """How long a fresh start should take by the estimate; inf when unknown."""
        if self.estimate is None:
            return INF
        return max(self.estimate - self.saved, 0.0)

    def work_at_risk(self, now: float) -> float:
        """Run time since the last checkpoint: what a preemption now would lose."""
        run = self.current_run
        if run is None:
            return 0.0
        elapsed = now - run.start
        if self.checkpoint_every:
            return elapsed % self.checkpoint_every
        return elapsed


@dataclass(slots=True, eq=False)
class ReasonCell:
    """The pending jobs of one signature (queue, priority, minCount, groups) in their queue.

    A cycle whose remaining jobs all have settled verdicts writes each cell's reason once
    instead of each job's (``cycle``: the tail of the walk); a job's ``pending_reason`` is the
    cell's while no later reason was written for the job itself. The counts say whether any
    job of the signature still waits on the scheduler, not on an operator; the jobs that wait
    on an operator are marked one by one (``ClusterState.apart``).
    """

    signature: tuple
    queue: str
    #: pending jobs by ``OperatorWait``
    counts: list[int] = field(default_factory=lambda: [0, 0, 0])
    #: the latest job enqueued with this signature (to find the signature's plan)
    sample: Job | None = field(default=None, repr=False)
    #: bounds on the estimated runtime of every job enqueued in it (they only widen)
    min_runtime: float = INF
    max_runtime: float = -INF
    reason: PendingReason | None = None
    #: the stamp the reason was written at
    at: int = 0
    #: the cycle's kind of its jobs (``plans.Plan.kind``), once a cycle asked; -1 before
    kind: int = -1

    def waits_on_scheduler(self, manual: bool) -> bool:
        """Whether any of its jobs waits on the scheduler, not on an operator (its queue asks
        for approval when ``manual``)."""
        counts = self.counts
        return bool(counts[OperatorWait.NONE] or (counts[OperatorWait.UNAPPROVED] and not manual))


@dataclass(slots=True)
class Queue:
    """A queue (Kueue's ClusterQueue): nominal quota, cohort limits, fair-share weight."""

    name: str
    cohort: str | None
    nominal: QuotaVec
    borrowing_limit: QuotaVec
    lending_limit: QuotaVec
    weight: float
    approval: Approval
    within_queue: WithinQueue
    reclaim_within_cohort: ReclaimWithinCohort
    borrow_within_cohort: BorrowWithinCohort
    usage: list[int] = field(default_factory=lambda: [0, 0, 0])
    #: decayed fair share (``usage_half_life``): the seconds over which the weight of past use
    #: halves, and the average milli-GPUs held, weighted so, up to ``past_at``
    half_life: float | None = None
    past_gpu: float = 0.0
    past_at: float = 0.0
    #: pending job order keys, kept sorted: (-priority, submit, seq, job id); a SortedList, since
    #: admitting from the head of a plain list of 50,000 moved the whole list each time
    pending: SortedList = field(default_factory=SortedList)
    admitted: int = 0
    #: on a cluster: no longer in the queue config, kept (with no quota) only while jobs of it
    #: that were running still run; nothing is admitted into it
    retired: bool = False

    #: nominal quota that is never lent (nominal minus lending limit); see ``refresh``
    guaranteed: QuotaVec = (0.0, 0.0, 0.0)

    def __post_init__(self) -> None:
        self.refresh()

    def refresh(self) -> None:
        """Recompute derived limits after the quota or the lending limit changed."""
        self.guaranteed = tuple(  # type: ignore[assignment]
            max(0.0, n - l) if l != INF else 0.0 for n, l in zip(self.nominal, self.lending_limit)
        )


@dataclass(slots=True)
class AuditEntry:
    """One line of the audit trail: an operator action, a node event, a preemption."""

    time: float
    actor: str
    action: str
    target: str
    result: str


@dataclass(slots=True)
class KeptRoom:
    """Room kept for a job that consolidation moved on a cluster: its pods were evicted, and
    its owner creates new ones later; until ``until`` (or until they come back and start here),
    no other job may take these GPUs, CPU and memory, and its queue stays charged ``charged``."""

    job_id: int
    placements: list[PodPlacement]
    charged: Vec
    until: float
    #: the gang it made room for
    made_room_for: str


class ClusterState:
    """Nodes, jobs, queues and the free-capacity indexes, changed only through its methods."""

    def __init__(self, name: str, levels: list[str], priority_classes: dict[str, int]) -> None:
        self.name = name
        self.levels = levels
        self.priority_classes = priority_classes
        self.nodes: list[Node] = []
        self.node_by_name: dict[str, int] = {}
        self.domains: list[list[Domain]] = [[] for _ in levels]
        self.jobs: list[Job] = []
        self.job_by_name: dict[str, int] = {}
        self.queues: dict[str, Queue] = {}
        self.cohorts: dict[str, list[str]] = {}
        #: model -> whole-free count -> node ids (schedulable nodes only)
        self.buckets: dict[str, list[set[int]]] = {}
        #: schedulable nodes with a GPU that is partly used
        self.partial_nodes: set[int] = set()
        self.max_gpus = 0
        self.running: set[int] = set()
        #: jobs holding some pods while they wait for the rest (pod-by-pod admission)
        self.incomplete: set[int] = set()
        #: running jobs by queue, and (estimated end, seq, id) of running jobs kept sorted
        self.running_by_queue: dict[str, set[int]] = {}
        self.ends: list[tuple[float, int, int]] = []
        #: preemptible running jobs summed by (queue, priority): [whole GPUs, gpu, cpu, memory]
        self.preemptible_totals: dict[tuple[str, int], list[int]] = {}
        #: running jobs that may run with fewer pods than they have (``minCount`` < pods)
        self.elastic_running: set[int] = set()
        #: the preemptible running jobs themselves, by (queue, priority)
        self.preemptible_jobs: dict[tuple[str, int], set[int]] = {}
        #: their whole GPUs by (queue, priority), per topology level by domain
        self.preemptible_domains: dict[tuple[str, int], list[dict[int, int]]] = {}
        self.admit_counter = 0
        self.stop_counter = 0
        #: other committed changes that can change a verdict (nodes, quotas, holdings, resizes)
        self.change_counter = 0
        #: per job id: its groups, minCount and the admission attempts the cycle makes for it
        #: (``cycle.attempts_of``), computed once rather than on every cycle
        self.attempt_plans: dict[int, Plan] = {}
        #: the same plans by (queue, priority, minCount, groups): jobs alike share one
        self.plans_by_signature: dict[tuple, Plan] = {}
        #: the memo keys of those attempts, interned as small ints
        self.memo_ids: dict[tuple, int] = {}
        #: how long finished runs took over how long their estimates said (the latest 256):
        #: users overshoot, and the start-time planner scales its estimates by the median
        self.runtime_ratios: deque[float] = deque(maxlen=256)
        #: the reason cells of the pending jobs, by signature (``signature_of``)
        self.reason_cells: dict[tuple, ReasonCell] = {}
        #: pending jobs a cycle marks one by one, never through their cell: held, awaiting
        #: approval in a manual queue, or hold/approval changed since the last such marking
        self.apart: set[int] = set()
        #: while a cycle reads the queues lazily (``AdmissionOrder.lazy``): the jobs enqueued
        #: since it started, which it does not see
        self.enqueued_since: set[int] | None = None
        #: failed preemption searches (``policy.preemption.VictimSearch``), kept across cycles
        #: until the ``epoch`` changes
        self.failed_searches: dict[tuple, tuple] = {}
        #: failed consolidation searches (``policy.consolidation``): (epoch, time) by kind of gang
        self.failed_consolidations: dict[tuple, tuple] = {}
        self.audit: list[AuditEntry] = []
        self.share_basis_cache: dict[str, tuple[float, float, float]] = {}
        self.pool_cache: dict[tuple[str, int], float] = {}
        #: bumped on every change of free capacity (trial placements included)
        self.capacity_changes = 0
        self._most_free: dict[int, tuple[int, int]] = {}
        #: whole GPUs free on schedulable nodes, cluster-wide
        self.total_whole_free = 0
        #: GPUs on schedulable nodes, and the milli-GPUs allocated on them (for utilization)
        self.schedulable_gpu_count = 0
        #: millicores of the schedulable nodes with GPUs in service (``cpu_per_gpu``)
        self.schedulable_gpu_node_cpu = 0
        self.schedulable_used_milli = 0
        #: the backfill reservation of the last cycle: (job id, planned start)
        self.reservation: tuple[int, float] | None = None
        #: room kept for jobs moved on a cluster until their pods come back, by job id
        self.kept_rooms: dict[int, KeptRoom] = {}
        #: the last reservation planned (a ``policy.backfill.Reservation``), reused while valid
        self.last_plan: object | None = None
        #: fragmentation-aware placement (``policy.fragmentation``): the workload learnt from
        #: submitted jobs, and schedulable nodes grouped by shape (model, free CPU, free GPUs
        #: sorted, free memory: ``node_shape``), each group a list of (tie rank, node id) kept
        #: sorted; off while None
        self.workload: WorkloadProfile | None = None
        self.shapes: dict[Shape, list[tuple[int, int]]] = {}
        #: ``Placer._wide_hosts``'s memo: (fragmentation model, node count, node ids)
        self.wide_hosts: tuple[object, int, frozenset[int]] | None = None
        #: free milli-GPUs per GPU model over the nodes in ``shapes``
        self.free_by_model: dict[str, int] = {}
        #: each node's place in the order that breaks ties between equal scores
        self.tie_rank: list[int] = []

    @property
    def cpu_per_gpu(self) -> float:
        """CPU cores per GPU over the schedulable nodes that have GPUs (0 without GPUs)."""
        return self.schedulable_gpu_node_cpu / (self.schedulable_gpu_count * MILLI) if self.schedulable_gpu_count else 0.0

    @property
    def epoch(self) -> tuple[int, int, int]:
        """Changes whenever a job starts or stops or anything else a verdict depends on changes
        (not on the undone trial placements a cycle makes): equal epochs, same cluster."""
        return (self.admit_counter, self.stop_counter, self.change_counter)

    def changed(self) -> None:
        """Record a committed change outside starts and stops (a node, a quota, a holding)."""
        self.change_counter += 1

    def enable_fragmentation(self, workload: WorkloadProfile, tie_rank: list[int] | None = None) -> None:
        """Turn on fragmentation-aware placement against ``workload`` (see ``policy.placement``)."""
        self.workload = workload
        self.tie_rank = list(tie_rank) if tie_rank is not None else list(range(len(self.nodes)))
        self.shapes = {}
        self.free_by_model = {}
        for node in self.nodes:
            if node.schedulable:
                self._shape_add(node)

    def _shape_add(self, node: Node) -> None:
        key = node_shape(node)
        insort(self.shapes.setdefault(key, []), (self.tie_rank[node.id], node.id))
        self.free_by_model[node.gpu_model] = self.free_by_model.get(node.gpu_model, 0) + sum(key[2])

    def _shape_remove(self, node: Node) -> None:
        key = node_shape(node)
        self.free_by_model[node.gpu_model] -= sum(key[2])
        group = self.shapes[key]
        group.remove((self.tie_rank[node.id], node.id))
        if not group:
            del self.shapes[key]

    # -- building -------------------------------------------------------------------------

    def add_node(self, node: Node) -> None:
        node.out_of_service = frozenset(i for i in node.out_of_service if 0 <= i < node.gpu_count)
        node.gpu_free = [0 if i in node.out_of_service else MILLI for i in range(node.gpu_count)]
        node.whole_free = node.gpus_in_service
        node.cpu_free = node.cpu
        node.mem_free = node.memory
        node.extra_free = dict(node.extra)
        self.nodes.append(node)
        self.node_by_name[node.name] = node.id
        self.change_counter += 1
        self.max_gpus = max(self.max_gpus, node.gpu_count)

    def finish_building(self) -> None:
        """Build topology domains and the free-capacity indexes once all nodes are in."""
        for b in self.buckets.values():
            while len(b) <= self.max_gpus:
                b.append(set())
        index: list[dict[tuple[int | None, str], int]] = [{} for _ in self.levels]
        for node in self.nodes:
            node.domains = []
            parent: int | None = None
            for li, key in enumerate(self.levels):
                value = node.name if key == HOSTNAME_LEVEL else node.labels.get(key, "")
                dkey = (parent, value)
                did = index[li].get(dkey)
                if did is None:
                    did = len(self.domains[li])
                    index[li][dkey] = did
                    label = value or f"(no {key})"
                    self.domains[li].append(Domain(li, label, [], parent, labelled=bool(value)))
                dom = self.domains[li][did]
                dom.node_ids.append(node.id)
                dom.gpu_total += node.gpu_count
                node.domains.append(did)
                parent = did
            if node.schedulable:
                self._index_add(node)

    # -- indexes --------------------------------------------------------------------------

    def _bucket(self, model: str) -> list[set[int]]:
        b = self.buckets.get(model)
        if b is None:
            b = [set() for _ in range(self.max_gpus + 1)]
            self.buckets[model] = b
        return b

    def most_whole_free(self, level: int) -> int:
        """The most whole GPUs free in one domain of ``level`` (kept until capacity changes)."""
        cached = self._most_free.get(level)
        if cached is None or cached[0] != self.capacity_changes:
            cached = self._most_free[level] = (self.capacity_changes, max(map(_WHOLE_FREE, self.domains[level]), default=0))
        return cached[1]

    def _index_add(self, node: Node) -> None:
        self.capacity_changes += 1
        self._bucket(node.gpu_model)[node.whole_free].add(node.id)
        self.total_whole_free += node.whole_free
        self.schedulable_gpu_count += node.gpus_in_service
        if node.gpus_in_service:
            self.schedulable_gpu_node_cpu += node.cpu
        self.schedulable_used_milli += node.gpus_in_service * MILLI - sum(node.gpu_free)
        if node.has_partial():
            self.partial_nodes.add(node.id)
        free = node.whole_free
        for li, did in enumerate(node.domains):
            dom = self.domains[li][did]
            dom.whole_free += free
            hist = dom.free_hist
            if len(hist) <= free:
                hist.extend([0] * (free + 1 - len(hist)))
            hist[free] += 1
        if self.workload is not None:
            self._shape_add(node)

    def _index_remove(self, node: Node) -> None:
        self.capacity_changes += 1
        self._bucket(node.gpu_model)[node.whole_free].discard(node.id)
        self.total_whole_free -= node.whole_free
        self.schedulable_gpu_count -= node.gpus_in_service
        if node.gpus_in_service:
            self.schedulable_gpu_node_cpu -= node.cpu
        self.schedulable_used_milli -= node.gpus_in_service * MILLI - sum(node.gpu_free)
        self.partial_nodes.discard(node.id)
        free = node.whole_free
        for li, did in enumerate(node.domains):
            dom = self.domains[li][did]
            dom.whole_free -= free
            dom.free_hist[free] -= 1
        if self.workload is not None:
            self._shape_remove(node)

    def set_schedulable(self, node: Node, cordoned: bool | None = None, failed: bool | None = None) -> None:
        self.change_counter += 1
        was = node.schedulable
        if was:
            self._index_remove(node)
        if cordoned is not None:
            node.cordoned = cordoned
        if failed is not None:
            node.failed = failed
        if node.schedulable:
            self._index_add(node)

    # -- capacity changes -----------------------------------------------------------------

    def allocate(self, node: Node, gpus: list[int], share: int, cpu: int, memory: int, extra: Extras = ()) -> None:
        """Take GPUs (whole, or ``share`` milli of each listed GPU), CPU, memory and ``extra``
        on a node."""
        indexed = node.schedulable
        whole_before = node.whole_free
        if indexed and self.workload is not None:
            self._shape_remove(node)
        free = node.gpu_free
        take = share or MILLI
        for i in gpus:
            if free[i] == MILLI:
                node.whole_free -= 1
            free[i] -= take
        node.cpu_free -= cpu
        node.mem_free -= memory
        if extra:
            left = node.extra_free
            for name, amount in extra:
                left[name] = extra_offered(left, name) - amount
        if indexed:
            self._reindex(node, whole_before, len(gpus) * take)
            if self.workload is not None:
                self._shape_add(node)

    def release(self, node: Node, gpus: list[int], share: int, cpu: int, memory: int, extra: Extras = ()) -> None:
        """Give back what ``allocate`` took."""
        indexed = node.schedulable
        whole_before = node.whole_free
        if indexed and self.workload is not None:
            self._shape_remove(node)
        free = node.gpu_free
        give = share or MILLI
        for i in gpus:
            free[i] += give
            if free[i] == MILLI:
                node.whole_free += 1
        node.cpu_free += cpu
        node.mem_free += memory
        if extra:
            left = node.extra_free
            for name, amount in extra:
                left[name] = extra_offered(left, name) + amount
        if indexed:
            self._reindex(node, whole_before, -len(gpus) * give)
            if self.workload is not None:
                self._shape_add(node)

    def _reindex(self, node: Node, whole_before: int, used_more: int) -> None:
        """``_index_remove`` before a change and ``_index_add`` after it, as one update: the
        same indexes, touched only where the node's whole GPUs free moved (the hot path of
        every placement trial and its undo). Fragmentation scoring's shapes are keyed by the
        whole shape, so with a workload profile the caller moves the node between shapes
        around the change (``_shape_remove`` before, ``_shape_add`` after)."""
        self.capacity_changes += 2
        whole = node.whole_free
        if whole != whole_before:
            bucket = self._bucket(node.gpu_model)
            bucket[whole_before].discard(node.id)
            bucket[whole].add(node.id)
            moved = whole - whole_before
            self.total_whole_free += moved
            domains = self.domains
            for li, did in enumerate(node.domains):
                dom = domains[li][did]
                dom.whole_free += moved
                hist = dom.free_hist
                hist[whole_before] -= 1
                if len(hist) <= whole:
                    hist.extend([0] * (whole + 1 - len(hist)))
                hist[whole] += 1
        self.schedulable_used_milli += used_more
        if node.has_partial():
            self.partial_nodes.add(node.id)
        else:
            self.partial_nodes.discard(node.id)

    def place(self, job: Job, placements: list[PodPlacement]) -> None:
        for p in placements:
            node = self.nodes[p.node_id]
            self.allocate(node, p.gpus, p.share, p.cpu, p.memory, p.extra)
            node.jobs.add(job.id)

    def unplace(self, job: Job, placements: list[PodPlacement]) -> None:
        for p in placements:
            node = self.nodes[p.node_id]
            self.release(node, p.gpus, p.share, p.cpu, p.memory, p.extra)
            node.jobs.discard(job.id)

    def room_for(self, placements: list[PodPlacement]) -> bool:
        """Whether every placement fits its node as things are (schedulable, its GPUs, CPU,
        memory and extras free), all of them together."""
        need: dict[int, tuple[dict[int, int], int, int, dict[str, int]]] = {}
        for p in placements:
            if not 0 <= p.node_id < len(self.nodes):
                return False
            gpus, cpu, memory, extra = need.get(p.node_id, ({}, 0, 0, {}))
            for i in p.gpus:
                gpus[i] = gpus.get(i, 0) + (p.share or MILLI)
            for name, amount in p.extra:
                extra[name] = extra.get(name, 0) + amount
            need[p.node_id] = (gpus, cpu + p.cpu, memory + p.memory, extra)
        for node_id, (gpus, cpu, memory, extra) in need.items():
            node = self.nodes[node_id]
            if not node.schedulable or node.cpu_free < cpu or node.mem_free < memory:
                return False
            if any(i >= len(node.gpu_free) or node.gpu_free[i] < milli for i, milli in gpus.items()):
                return False
            if any(extra_offered(node.extra_free, name) < amount for name, amount in extra.items()):
                return False
        return True

    def keep_room(self, room: KeptRoom, now: float) -> None:
        """Hold ``room`` (``KeptRoom``): its capacity is taken and its queue charged until
        ``give_back_room``."""
        self.give_back_room(room.job_id, now)  # one room per job: a room kept before is released
        self.age_usage(now)
        for p in room.placements:
            self.allocate(self.nodes[p.node_id], p.gpus, p.share, p.cpu, p.memory, p.extra)
        q = self.queues[self.jobs[room.job_id].queue]
        for k in range(3):
            q.usage[k] += room.charged[k]
        self.kept_rooms[room.job_id] = room
        self.changed()

    def give_back_room(self, job_id: int, now: float) -> KeptRoom | None:
        """Release the room kept for ``job_id``, if any, and return it."""
        room = self.kept_rooms.pop(job_id, None)
        if room is None:
            return None
        self.age_usage(now)
        for p in room.placements:
            self.release(self.nodes[p.node_id], p.gpus, p.share, p.cpu, p.memory, p.extra)
        q = self.queues[self.jobs[room.job_id].queue]
        for k in range(3):
            q.usage[k] -= room.charged[k]
        self.changed()
        return room

    def pass_kept_room(self, old_id: int, new_id: int, now: float) -> None:
        """The job ``old_id`` came back as ``new_id`` (its pods were made anew under other names):
        the room kept for it is the new job's, if it is in the same queue (else it is given back)."""
        room = self.kept_rooms.get(old_id)
        if room is None:
            return
        if self.jobs[old_id].queue != self.jobs[new_id].queue:
            self.give_back_room(old_id, now)
            return
        del self.kept_rooms[old_id]
        room.job_id = new_id
        self.kept_rooms[new_id] = room

    # -- running jobs ---------------------------------------------------------------------

    def mark_running(self, job: Job) -> None:
        """Record that ``job`` holds resources from now on (its current run is set)."""
        from bisect import insort

        run = job.current_run
        assert run is not None
        job.est_end = (run.start if run.work_start is None else run.work_start) + job.estimated_runtime()
        self.running.add(job.id)
        self.running_by_queue.setdefault(job.queue, set()).add(job.id)
        if job.min_count < job.total_pods:
            self.elastic_running.add(job.id)
        insort(self.ends, (job.est_end, job.seq, job.id))
        q = self.queues.get(job.queue)
        borrowed = q is not None and any(job.charged[r] and q.usage[r] > q.nominal[r] for r in range(3))
        job.shielded = job.spared or (not job.preemptible and not borrowed)
        if not job.shielded:
            self._count_preemptible(job, run, +1)
            self.preemptible_jobs.setdefault((job.queue, job.priority), set()).add(job.id)

    def _count_preemptible(self, job: Job, run: Run, sign: int) -> None:
        key = (job.queue, job.priority)
        t = self.preemptible_totals.setdefault(key, [0, 0, 0, 0])
        t[0] += sign * sum(len(p.gpus) for p in run.placements if not p.share)
        per_level = self.preemptible_domains.get(key)
        if per_level is None:
            per_level = self.preemptible_domains[key] = [{} for _ in self.levels]
        for p in run.placements:
            if p.share or not p.gpus:
                continue
            gpus = sign * len(p.gpus)
            for held, domain in zip(per_level, self.nodes[p.node_id].domains):
                left = held.get(domain, 0) + gpus
                if left:
                    held[domain] = left
                else:
                    del held[domain]
        t[1] += sign * job.charged[0]
        t[2] += sign * job.charged[1]
        t[3] += sign * job.charged[2]

    def mark_stopped(self, job: Job, run: Run) -> None:
        """Undo ``mark_running``; call before the job's charge is dropped."""
        from bisect import bisect_left

        if job.id in self.running and not job.shielded:
            self._count_preemptible(job, run, -1)
            self.preemptible_jobs.get((job.queue, job.priority), set()).discard(job.id)
        self.stop_counter += 1
        self.running.discard(job.id)
        self.elastic_running.discard(job.id)
        self.running_by_queue.get(job.queue, set()).discard(job.id)
        key = (job.est_end, job.seq, job.id)
        i = bisect_left(self.ends, key)
        if i < len(self.ends) and self.ends[i] == key:
            del self.ends[i]

    # -- queues ---------------------------------------------------------------------------

    def age_usage(self, now: float) -> None:
        """Bring the decayed average use of the queues with a half-life up to ``now`` (call it
        before their usage changes at a new moment: the average is of what they held since)."""
        for queue in self.queues.values():
            if queue.half_life is None:
                continue
            elapsed = now - queue.past_at
            if elapsed > 0:
                kept = 0.5 ** (elapsed / queue.half_life)
                queue.past_gpu = queue.past_gpu * kept + queue.usage[0] * (1.0 - kept)
                queue.past_at = now

    def runtime_scale(self) -> float:
        """The median of ``runtime_ratios`` once 16 runs have finished (1 before): what an
        estimate is multiplied by to say when a run will really end."""
        ratios = self.runtime_ratios
        if len(ratios) < RATIOS_TO_LEARN:
            return 1.0
        ordered = sorted(ratios)
        return ordered[len(ordered) // 2]

    def note_run_finished(self, job: Job, now: float) -> None:
        """A run ended by itself: remember how it compared with its estimate."""
        run = job.current_run
        if run is None or job.est_end == INF:
            return
        began = run.start if run.work_start is None else run.work_start
        if job.est_end > began:
            self.runtime_ratios.append((now - began) / (job.est_end - began))

    def __setstate__(self, saved: dict) -> None:
        self.__dict__.update(saved)
        _clock_past(max([job._reason_at for job in self.jobs] + [cell.at for cell in self.reason_cells.values()], default=0))

    def enqueue(self, job: Job) -> None:
        self.queues[job.queue].pending.add((*job.order_key(), job.id))
        if self.enqueued_since is not None:
            self.enqueued_since.add(job.id)
        signature = signature_of(job)
        cell = self.reason_cells.get(signature)
        if cell is None:
            cell = self.reason_cells[signature] = ReasonCell(signature, job.queue)
        cell.counts[operator_wait(job)] += 1
        cell.sample = job
        runtime = job.estimated_runtime()
        cell.min_runtime = min(cell.min_runtime, runtime)
        cell.max_runtime = max(cell.max_runtime, runtime)
        job._cell = cell
        job._reason_at = reason_stamp()  # a cell written before it joined is not its reason
        if self.waits_on_operator(job):
            self.apart.add(job.id)

    def dequeue(self, job: Job) -> None:
        pending = self.queues[job.queue].pending
        key = (*job.order_key(), job.id)
        if key in pending:
            pending.remove(key)
            cell = job._cell
            if cell is not None:
                cell.counts[operator_wait(job)] -= 1
                if not any(cell.counts) and self.reason_cells.get(cell.signature) is cell:
                    del self.reason_cells[cell.signature]
        job._cell = None
        self.apart.discard(job.id)

    def waits_on_operator(self, job: Job) -> bool:
        """Held, or awaiting approval in a queue that asks for it."""
        return job.held or (not job.approved and self.queues[job.queue].approval == Approval.MANUAL)

    def set_operator_flags(self, job: Job, *, held: bool | None = None, approved: bool | None = None) -> None:
        """Hold, release or approve ``job``: through here, so its cell's counts stay right."""
        cell = job._cell
        if cell is not None:
            cell.counts[operator_wait(job)] -= 1
        if held is not None:
            job.held = held
        if approved is not None:
            job.approved = approved
        if cell is not None:
            cell.counts[operator_wait(job)] += 1
            self.apart.add(job.id)  # its next marking sets its state too

    def charge(self, job: Job, amount: Vec) -> None:
        q = self.queues[job.queue]
        q.usage[0] += amount[0]
        q.usage[1] += amount[1]
        q.usage[2] += amount[2]
        job.charged = amount

    def uncharge(self, job: Job) -> None:
        q = self.queues[job.queue]
        a = job.charged
        q.usage[0] -= a[0]
        q.usage[1] -= a[1]
        q.usage[2] -= a[2]
        job.charged = ZERO

    def quotas_changed(self) -> None:
        """Drop everything derived from queue limits (after a setQuota)."""
        self.change_counter += 1
        for q in self.queues.values():
            q.refresh()
        self.share_basis_cache.clear()
        self.pool_cache.clear()

    # -- lookups --------------------------------------------------------------------------

    def job(self, name: str) -> Job:
        return self.jobs[self.job_by_name[name]]

    def node(self, name: str) -> Node:
        return self.nodes[self.node_by_name[name]]

