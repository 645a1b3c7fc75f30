"""The engine's records: plain slotted nodes, pods, jobs, queues, and the units they count in.

Pydantic stays at the boundary (scenario files); here everything is a ``@dataclass(slots=True)``
with integer units so the hot path does no parsing and no float drift:

- GPU amounts are *milli-GPUs* (``1000`` = one whole GPU, ``460`` = a 0.46 share);
- CPU is millicores, memory bytes; a node that does not state them has ``UNLIMITED``.

The records change capacity only through ``state.ClusterState`` (which keeps the indexes over
them); they are apart from it so that the one class that owns the cluster reads on its own.
``state`` re-exports them: import them from either.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import count
from typing import Protocol

from sortedcontainers import SortedList

from .enums import Approval, BorrowWithinCohort, EndReason, JobState, PendingReason, ReclaimWithinCohort, TopologyMode, WithinQueue
from .policy.filters.extras import Extras

MILLI = 1000
UNLIMITED = 1 << 62
HOSTNAME_LEVEL = "kubernetes.io/hostname"
INF = float("inf")

#: stamps that order every write of a pending reason, a job's own or its ``ReasonCell``'s: the
#: later one is the reason (a process-wide counter, so stamps from any state compare; a state
#: unpickled from another process moves it past its own stamps)
reason_stamp = count(1).__next__

#: finished runs before the start-time planner trusts their ratio to the estimates
RATIOS_TO_LEARN = 16


def clock_past(stamp: int) -> None:
    """Move ``reason_stamp`` past ``stamp`` (a state unpickled from another process)."""
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


class PlacementRules(Protocol):
    """Rules a pod group's pods follow against other pods (on a cluster: pod affinity,
    anti-affinity, topology spread), judged by the backend that knows the pods around them. The
    engine only asks, per pod, where such a pod may go now, given where the job's own pods went
    so far in this attempt (``placed``: pod group name and node id); see ``filters.pod_rules``.
    ``gone`` names running jobs whose pods count as gone: the victims a preemption search has
    lifted off the state, so that evicting a victim frees a rule as it frees capacity."""

    def allowed(self, nodes: Sequence[Node], placed: Sequence[tuple[str, int]],
                gone: frozenset[int] = frozenset()) -> frozenset[int]:
        """The ids of the nodes the rules allow for one more pod."""
        ...

    def tiers(self, nodes: Sequence[Node], placed: Sequence[tuple[str, int]],
              allowed: frozenset[int], gone: frozenset[int] = frozenset()) -> tuple[frozenset[int], ...]:
        """The soft rules' ranking of the ``allowed`` nodes as preference tiers, best first
        (empty: no preference)."""
        ...

    def refusal(self, node: Node, placed: Sequence[tuple[str, int]] = ()) -> str | None:
        """The words for the rule that keeps a pod off ``node`` as things are, with the job's
        ``placed`` pods counted (None: no rule does)."""
        ...

    def words(self) -> str:
        """The rules in short, for a job's details (empty: none of its own; it is only kept
        away by other pods' anti-affinity)."""
        ...


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
    #: rules against other pods (``PlacementRules``); None: none, and placement pays nothing
    rules: PlacementRules | None = None

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
    #: the estimated runtime of each of its pending jobs, sorted, and by job id as it was when
    #: the job was enqueued (what to take out when it leaves): the cycle reads off its ends
    #: whether the backfill reservation holds back all, some or none of the cell's jobs
    runtimes: SortedList = field(default_factory=SortedList, repr=False)
    runtime_of: dict[int, float] = field(default_factory=dict, repr=False)
    reason: PendingReason | None = None
    #: the stamp the reason was written at
    at: int = 0

    @property
    def min_runtime(self) -> float:
        """The shortest estimated runtime of its pending jobs (inf when none)."""
        return self.runtimes[0] if self.runtimes else INF

    @property
    def max_runtime(self) -> float:
        """The longest estimated runtime of its pending jobs (-inf when none)."""
        return self.runtimes[-1] if self.runtimes else -INF

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
