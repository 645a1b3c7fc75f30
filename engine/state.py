"""The engine's state: the cluster and its jobs, with the indexes that make placement cheap.

The records it holds (nodes, pods, jobs, queues, and the integer units they count in) are in
``records``, re-exported here. What the scheduling cycle remembers between cycles is not here
but in the cycle's memo (``memo``), so this class is the cluster, not one algorithm's cache.

``ClusterState`` owns the indexes that make placement cheap at 5,000 nodes: for every GPU model,
the schedulable nodes bucketed by how many *whole* GPUs they have free, the nodes with a partly
used GPU, and per topology domain the whole GPUs free. Every change of capacity goes through
``ClusterState.allocate`` / ``ClusterState.release`` so the indexes can never drift.

Longer than the house's 600 lines: ``ClusterState`` keeps its indexes and the only ways to
change capacity in one class, so that nothing else can make them drift.
"""

from __future__ import annotations

from bisect import insort
from collections import deque
from typing import TYPE_CHECKING

from . import records
from .enums import Approval, EndReason

# re-exported: the records and units are imported from here across the engine and backends
from .records import (
    HOSTNAME_LEVEL,
    INF,
    MEMORY_UNIT,
    MILLI,
    RATIOS_TO_LEARN,
    RESOURCE_NAMES,
    UNLIMITED,
    ZERO,
    AuditEntry,
    Domain,
    Job,
    KeptRoom,
    Node,
    OperatorWait,
    PodGroup,
    PodPlacement,
    QuotaVec,
    Queue,
    ReasonCell,
    Run,
    Shape,
    Vec,
    node_shape,
    operator_wait,
    signature_of,
    vadd,
    vsub,
)

# what a pod asks beyond GPUs, CPU and memory is a placement feature of its own (its filter, its
# accounting rule, host ports); ``Extras``, ``PODS``, ``HOST_PORT`` and ``extra_offered`` stay
# importable from here for the backends
from .policy.filters.extras import PODS, Extras, extra_offered
from .policy.filters.hostports import HOST_PORT

if TYPE_CHECKING:
    from .policy.fragmentation import WorkloadProfile

__all__ = [
    "HOSTNAME_LEVEL", "HOST_PORT", "INF", "MEMORY_UNIT", "MILLI", "PODS", "RATIOS_TO_LEARN", "RESOURCE_NAMES",
    "UNLIMITED", "ZERO", "AuditEntry", "ClusterState", "Domain", "Extras", "Job", "KeptRoom", "Node",
    "OperatorWait", "PodGroup", "PodPlacement", "QuotaVec", "Queue", "ReasonCell", "Run", "Shape", "Vec",
    "extra_offered", "node_shape", "operator_wait", "signature_of", "vadd", "vsub",
]


def lost_to_a_node(job: Job) -> bool:
    """Whether ``job``'s last run ended because its node failed or was drained (it queues again)."""
    return bool(job.runs) and job.runs[-1].end_reason in (EndReason.NODE_FAILED, EndReason.DRAINED)


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
        #: how long finished runs took over how long their estimates said (the latest 256):
        #: users overshoot, and the start-time planner scales its estimates by the median
        self.runtime_ratios: deque[float] = deque(maxlen=256)
        #: the same per queue (``runtime_scale(queue)``): a team's own habit of estimating
        self.queue_ratios: dict[str, deque[float]] = {}
        #: the reason cells of the pending jobs, by signature (``signature_of``)
        self.reason_cells: dict[tuple, ReasonCell] = {}
        #: pending jobs a cycle marks one by one, never through their cell: held, awaiting
        #: approval in a manual queue, or hold/approval changed since the last such marking
        self.apart: set[int] = set()
        #: while a cycle reads the queues lazily (``AdmissionOrder.lazy``): the jobs enqueued
        #: since it started, which it does not see
        self.enqueued_since: set[int] | None = None
        self.audit: list[AuditEntry] = []
        #: bumped whenever a queue's limits change (``quotas_changed``)
        self.quota_changes = 0
        #: bumped on every change of free capacity (trial placements included)
        self.capacity_changes = 0
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
        #: the last reservation planned (a ``policy.backfill.Reservation``), reused while valid:
        #: not a memo (the cycle's memos are ``memo.CycleMemo``), since a reservation's start
        #: never moves later while it still holds (``reservations.reserve``)
        self.last_plan: object | None = None
        #: fragmentation-aware placement (``policy.fragmentation``): the workload learnt from
        #: submitted jobs, and schedulable nodes grouped by shape (model, free CPU, free GPUs
        #: sorted, free memory: ``node_shape``), each group a list of (tie rank, node id) kept
        #: sorted; off while None
        self.workload: WorkloadProfile | None = None
        self.shapes: dict[Shape, list[tuple[int, int]]] = {}
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

    def runtime_scale(self, queue: str | None = None) -> float:
        """The median of ``runtime_ratios`` once 16 runs have finished (1 before): what an
        estimate is multiplied by to say when a run will really end. Given a ``queue`` with 16
        runs finished, its own runs' median (its users' habit), else the cluster's."""
        ratios = self.runtime_ratios
        if queue is not None:
            own = self.queue_ratios.get(queue)
            if own is not None and len(own) >= RATIOS_TO_LEARN:
                ratios = own
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
            ratio = (now - began) / (job.est_end - began)
            self.runtime_ratios.append(ratio)
            self.queue_ratios.setdefault(job.queue, deque(maxlen=64)).append(ratio)

    def __setstate__(self, saved: dict) -> None:
        self.__dict__.update(saved)
        self.__dict__.setdefault("queue_ratios", {})
        records.clock_past(max([job._reason_at for job in self.jobs] + [cell.at for cell in self.reason_cells.values()], default=0))

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
        cell.runtime_of[job.id] = runtime
        cell.runtimes.add(runtime)
        job._cell = cell
        job._reason_at = records.reason_stamp()  # a cell written before it joined is not its reason
        if self.waits_on_operator(job) or lost_to_a_node(job):
            self.apart.add(job.id)  # lost to a node: the backfill guard is not its cell's (``reservations``)

    def dequeue(self, job: Job) -> None:
        pending = self.queues[job.queue].pending
        key = (*job.order_key(), job.id)
        if key in pending:
            pending.remove(key)
            cell = job._cell
            if cell is not None:
                cell.counts[operator_wait(job)] -= 1
                cell.runtimes.remove(cell.runtime_of.pop(job.id))
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
        self.quota_changes += 1

    # -- lookups --------------------------------------------------------------------------

    def job(self, name: str) -> Job:
        return self.jobs[self.job_by_name[name]]

    def node(self, name: str) -> Node:
        return self.nodes[self.node_by_name[name]]

