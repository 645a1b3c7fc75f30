"""Backfill (Slurm's EASY) and start-time estimates.

EASY backfill gives the first job that is blocked for capacity a *reservation*: walking the
running jobs by their estimated end (start plus the user's ``estimate``), we release their
resources on the state until the blocked job fits. The time of the last release is the shadow
time, the nodes it would use are reserved. A later job may still start now if it ends (by its
estimate) before the shadow time, or if what it takes on the reserved nodes leaves the
reservation whole: the ``Guard`` holds, per reserved node, what may still be taken by jobs that
run past the shadow time. Jobs without an estimate run past any shadow time.

``estimate_starts`` is the same planner run forward over every pending job in admission order: at
each estimated release it starts whatever fits (quota and placement), giving ``estimatedStart``
for the report and the console. It works on the state in place and undoes everything. It
predicts run times from the estimates scaled by each queue's own record of finished runs
(``RuntimeModel``: Tsafrir, Etsion and Feitelson's system-generated predictions for backfilling,
learnt per queue), while reservations keep the estimates, which are upper bounds.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from ..enums import TopologyMode
from ..memo import most_whole_free
from ..state import INF, MILLI, ClusterState, Job, Vec
from . import quota
from .filters.registry import node_allowed
from .placement import (
    Guard,
    Placer,
    gang_counts,
    pods_fitting_by_gpus,
    request_of,
)

#: Pending jobs the start-time planner looks at; later ones get no estimate.
PLAN_DEPTH = 2000


@dataclass(slots=True)
class Reservation:
    job_id: int
    start: float
    guard: Guard
    #: (admissions, stops) of the state it was planned on: while both are unchanged, so is the plan
    epoch: tuple[int, int] = (0, 0)
    #: what the holder takes on each node at ``start``: [whole GPUs, cpu, memory, then a
    #: (GPU, milli) pair per slice of a shared GPU]
    takes: dict[int, list] = field(default_factory=dict)

    def fresh_copy(self) -> Reservation:
        """The same plan with a guard that has not been drawn on yet."""
        return Reservation(
            self.job_id, self.start, Guard({k: list(v) for k, v in self.guard.headroom.items()}), self.epoch, self.takes
        )


def _takes(placer: Placer) -> dict[int, list]:
    """Per node, what the placed gang took (``Reservation.takes``)."""
    takes: dict[int, list] = {}
    for p in placer.taken:
        t = takes.setdefault(p.node_id, [0, 0, 0])
        if p.share:
            t.extend((gpu, p.share) for gpu in p.gpus)
        else:
            t[0] += len(p.gpus)
        t[1] += p.cpu
        t[2] += p.memory
    return takes


def kept_reservation(state: ClusterState, kept: Reservation, now: float) -> Reservation | None:
    """``kept``, an earlier plan for the same holder, if it still holds: on each node it takes,
    what is free now plus what the jobs running there give back by ``kept.start`` (by their
    estimates) still covers the holder. The guard is then what is left over at that start.

    This is EASY backfill's promise: the reservation's start only ever moves earlier. Planning
    afresh each cycle would pick the best-fitting nodes anew, and jobs started beside the old
    nodes under the old guard can then fill every candidate, pushing the start back by hours.
    """
    if not kept.takes or kept.start < now:
        return None
    holder = state.jobs[kept.job_id]
    if not quota_by(state, holder, request_of(holder, gang_counts(holder, False)), kept.start):
        return None  # its quota will not be there by then: plan afresh
    nodes = state.nodes
    headroom: dict[int, list[int]] = {}
    for nid, (whole, cpu, memory, *slices) in kept.takes.items():
        node = nodes[nid]
        if not node.schedulable:
            return None
        free = list(node.gpu_free)
        cpu_free, mem_free = node.cpu_free, node.mem_free
        for jid in node.jobs:
            job = state.jobs[jid]
            if job.est_end > kept.start:
                continue
            run = job.current_run
            if run is None:
                continue
            for p in run.placements:
                if p.node_id == nid:
                    for g in p.gpus:
                        free[g] += p.share or MILLI
                    cpu_free += p.cpu
                    mem_free += p.memory
        # the slices of shared GPUs, largest first, each on a GPU already in use if one has room,
        # else on a whole one (enough for the holder to fit, not necessary)
        for _, share in sorted(slices, key=lambda pair: -pair[1]):
            partial = [i for i, f in enumerate(free) if share <= f < MILLI]
            if partial:
                free[min(partial, key=lambda i: free[i])] -= share
                continue
            whole_gpu = next((i for i, f in enumerate(free) if f == MILLI and i not in node.out_of_service), None)
            if whole_gpu is None:
                return None
            free[whole_gpu] -= share
        whole_free = sum(1 for i, f in enumerate(free) if f == MILLI and i not in node.out_of_service)
        if whole_free < whole or cpu_free < cpu or mem_free < memory:
            return None
        headroom[nid] = [whole_free - whole, cpu_free - cpu, mem_free - memory]
    return Reservation(kept.job_id, kept.start, Guard(headroom), (state.admit_counter, state.stop_counter), kept.takes)


def cached_reservation(
    previous: Reservation | None, state: ClusterState, job: Job, now: float
) -> Reservation | None:
    """The previous cycle's plan for ``job`` when no job has started or stopped since."""
    if previous is None or previous.job_id != job.id or previous.start < now:
        return None
    if previous.epoch != (state.admit_counter, state.stop_counter):
        return None
    return previous.fresh_copy()


def quick_reject(state: ClusterState, job: Job, counts: list[int]) -> bool:
    """True when the gang cannot fit whatever the arrangement (cheap aggregate checks)."""
    need_total = 0
    for g, n in zip(job.groups, counts):
        need_total += g.whole_gpus * n
    if need_total > state.total_whole_free:
        return True
    for g, n in zip(job.groups, counts):
        w = g.whole_gpus * n
        if w and g.topology_mode == TopologyMode.REQUIRED and g.topology_level is not None:
            if most_whole_free(state, g.topology_level) < w:
                return True
    return False


def _release(state: ClusterState, job: Job) -> None:
    run = job.current_run
    assert run is not None
    state.unplace(job, run.placements)


def _restore(state: ClusterState, job: Job) -> None:
    run = job.current_run
    assert run is not None
    state.place(job, run.placements)


def _first_step(state: ClusterState, job: Job, counts: list[int]) -> int | None:
    """Counting only, no state changes: the first release after which the gang could fit.

    For a one-group gang of whole-GPU pods, walks the estimated ends adding released GPUs,
    CPU and memory to per-node tallies and counts how many pods fit per node, per domain of
    the required level (a domain's count is taken on first touch), or cluster-wide (from the
    capacity buckets). It may be early (it ignores NVLink and the spread of GPUs over models),
    never late (a GPU shared between jobs counts as whole once the last of them is gone), so
    the caller still checks by placing. Returns 0 for gangs it does not model, None when the
    gang never fits by the estimates.
    """
    if len(job.groups) != 1 or not job.groups[0].whole_gpus:
        return 0
    g = job.groups[0]
    n, w = counts[0], g.whole_gpus
    nodes = state.nodes
    level = g.topology_level if g.topology_mode == TopologyMode.REQUIRED else None
    tally: dict[int, list[int]] = {}
    #: per node whose shared GPUs are being given back: its GPUs' free milli as they would be
    shared_free: dict[int, list[int]] = {}

    def pods_on(nid: int) -> int:
        node = nodes[nid]
        if not node.schedulable or not node_allowed(g, node):
            return 0
        free, cpu, mem = tally.get(nid) or (node.whole_free, node.cpu_free, node.mem_free)
        fit = free // w
        if g.cpu:
            fit = min(fit, cpu // g.cpu)
        if g.memory:
            fit = min(fit, mem // g.memory)
        return fit

    total = pods_fitting_by_gpus(state, g)
    domain_fit: dict[int, int] = {}
    best_domain = 0  # the largest of domain_fit's values (they only grow)
    ends = state.ends
    for i, (end, _, jid) in enumerate(ends):
        if end == INF:
            return None
        run = state.jobs[jid].current_run
        assert run is not None
        for p in run.placements:
            nid = p.node_id
            if not nodes[nid].schedulable:
                continue
            if level is not None:
                d = nodes[nid].domains[level]
                if d not in domain_fit:
                    domain_fit[d] = sum(pods_on(x) for x in state.domains[level][d].node_ids)
                    best_domain = max(best_domain, domain_fit[d])
            before = pods_on(nid)
            t = tally.get(nid)
            if t is None:
                node = nodes[nid]
                t = tally[nid] = [node.whole_free, node.cpu_free, node.mem_free]
            if p.share:
                gpus = shared_free.get(nid)
                if gpus is None:
                    gpus = shared_free[nid] = list(nodes[nid].gpu_free)
                for gi in p.gpus:
                    gpus[gi] += p.share
                    if gpus[gi] == MILLI:
                        t[0] += 1
            else:
                t[0] += len(p.gpus)
                gpus = shared_free.get(nid)
                if gpus is not None:
                    for gi in p.gpus:
                        gpus[gi] += MILLI
            t[1] += p.cpu
            t[2] += p.memory
            delta = pods_on(nid) - before
            total += delta
            if level is not None:
                d = nodes[nid].domains[level]
                domain_fit[d] += delta
                best_domain = max(best_domain, domain_fit[d])
        if i + 1 < len(ends) and ends[i + 1][0] == end:
            continue
        if total >= n and (level is None or best_domain >= n):
            return i
    return None


def _headroom(state: ClusterState, placer: Placer) -> dict[int, list[int]]:
    """What stays free on each node the placed gang took (the guard of its reservation)."""
    nodes = state.nodes
    return {p.node_id: [nodes[p.node_id].whole_free, nodes[p.node_id].cpu_free, nodes[p.node_id].mem_free] for p in placer.taken}


def reservation_now(state: ClusterState, job: Job, counts: list[int], now: float) -> Reservation | None:
    """A reservation from ``now`` when the gang fits as things are: where it fits is kept for it."""
    if quick_reject(state, job, counts):
        return None
    placer = Placer(state)
    if not placer.place_gang(job, counts):
        return None
    headroom = _headroom(state, placer)
    takes = _takes(placer)
    placer.undo(job)
    return Reservation(job.id, now, Guard(headroom), (state.admit_counter, state.stop_counter), takes)


def plan_reservation(state: ClusterState, job: Job, counts: list[int], now: float) -> Reservation | None:
    """Where and when ``job`` could start if running jobs end as estimated; None if never.

    From ``now`` when its quota and the room are there already (the jobs ahead of it in the
    order may take them first: the reservation keeps them for it); else from the first release
    after which both are."""
    if quota.check(state, state.queues[job.queue], request_of(job, counts)).fits:
        found = reservation_now(state, job, counts, now)
        if found is not None:
            return found
    ends = state.ends
    first = _first_step(state, job, counts)
    if first is None:
        return None
    queue = state.queues[job.queue]
    request = request_of(job, counts)
    released: list[Job] = []
    found: Reservation | None = None
    for i, (end, _, jid) in enumerate(ends):
        if end == INF:
            break
        end = max(end, now)
        v = state.jobs[jid]
        _release(state, v)
        _usage(state, v.queue, v.charged, -1)
        released.append(v)
        if i < first or (i + 1 < len(ends) and max(ends[i + 1][0], now) == end):
            continue
        if quick_reject(state, job, counts) or not quota.check(state, queue, request).fits:
            continue  # the room is not there yet, or its quota (own or the cohort's) is not
        placer = Placer(state)
        if placer.place_gang(job, counts):
            headroom = _headroom(state, placer)
            takes = _takes(placer)
            placer.undo(job)
            found = Reservation(job.id, end, Guard(headroom), (state.admit_counter, state.stop_counter), takes)
            break
    for v in reversed(released):
        _usage(state, v.queue, v.charged, +1)
        _restore(state, v)
    return found


def quota_by(state: ClusterState, job: Job, request: Vec, start: float) -> bool:
    """Whether ``request`` fits ``job``'s quota at ``start``, once the running jobs of every
    queue drawing on the same quota that end by then (by their estimates) have given theirs back."""
    ending = quota.ending_by(state, job.queue, start)
    for v in ending:
        _usage(state, v.queue, v.charged, -1)
    try:
        return quota.check(state, state.queues[job.queue], request).fits
    finally:
        for v in ending:
            _usage(state, v.queue, v.charged, +1)


def estimate_starts(state: ClusterState, order: list[Job], now: float) -> dict[int, float]:
    """Planned start of each job in ``order`` (pending jobs, admission order) that will start.

    At each estimated release the pending jobs are tried in order. A *shape* (queue and pod
    groups) that failed once is not tried again until the next release: within one step the
    state only fills up, so what failed still fails (the quick aggregate reject included). Once
    every shape left in the backlog has failed, the rest of the step is skipped at once; a step's
    work is then the jobs up to the last shape's first failure, not the whole backlog (a backlog
    falls into a few dozen shapes).
    """
    out: dict[int, float] = {}
    pending = order[:PLAN_DEPTH]
    if not pending:
        return out
    # runs end when their estimates say, scaled by how finished runs compared with theirs
    scale_of = runtime_scales(state)
    jobs = state.jobs
    # heap entries: (time, tie-break, running job id or ~index into ``planned``)
    heap = [(max(_scaled_end(state, j, end, scale_of(jobs[j].queue)), now), seq, j) for end, seq, j in state.ends if end != INF]
    heapq.heapify(heap)
    released: list[Job] = []
    planned: list[tuple[Job, list, Vec]] = []
    live: set[int] = set()
    # the reservation's holder is not started before its reserved time
    holder, hold_until = state.reservation if state.reservation is not None else (None, -INF)
    # each job's shape, numbered; and the pending jobs per shape (a step is over once every
    # shape with jobs left in it has failed)
    numbers: dict[tuple, int] = {}
    shape_of = {job.id: numbers.setdefault((job.queue, job.groups), len(numbers)) for job in pending}
    left_in_backlog: dict[int, int] = {}
    for shape in shape_of.values():
        left_in_backlog[shape] = left_in_backlog.get(shape, 0) + 1
    # the nodes whose free capacity changed, in order; and for a one-domain gang shape whose
    # placement failed, how much of that list had been written then (``_still_fails``)
    changed: list[int] = []
    last_failed: dict[int, int] = {}
    roomiest: dict[int, tuple[int, int]] = {}  # level: (len(changed) then, most whole GPUs free in a domain)

    def rejected(job: Job, counts: list[int]) -> bool:
        """``quick_reject``, the roomiest domain of a level kept until a node changes."""
        need_total = 0
        for g, n in zip(job.groups, counts):
            need_total += g.whole_gpus * n
        if need_total > state.total_whole_free:
            return True
        for g, n in zip(job.groups, counts):
            w = g.whole_gpus * n
            level = g.topology_level
            if w and g.topology_mode == TopologyMode.REQUIRED and level is not None:
                seen = roomiest.get(level)
                if seen is None or seen[0] != len(changed):
                    seen = roomiest[level] = (len(changed), max((d.whole_free for d in state.domains[level]), default=0))
                if seen[1] < w:
                    return True
        return False

    try:
        while heap and pending:
            t = heap[0][0]
            while heap and heap[0][0] == t:
                _, _, ref = heapq.heappop(heap)
                if ref >= 0:
                    job = state.jobs[ref]
                    _release(state, job)
                    _usage(state, job.queue, job.charged, -1)
                    released.append(job)
                    changed.extend(p.node_id for p in job.current_run.placements)  # type: ignore[union-attr]
                else:
                    job, taken, req = planned[~ref]
                    state.unplace(job, taken)
                    _usage(state, job.queue, req, -1)
                    live.discard(~ref)
                    changed.extend(p.node_id for p in taken)
            failed: set[int] = set()
            ahead = dict(left_in_backlog)  # jobs of each shape not visited yet in this step
            open_shapes = len(ahead)  # shapes with jobs ahead that have not failed
            started: set[int] = set()
            for job in pending:
                shape = shape_of[job.id]
                ahead[shape] -= 1
                if shape in failed:
                    continue
                if job.id == holder and t < hold_until:
                    if not ahead[shape]:
                        open_shapes -= 1
                        if not open_shapes:
                            break
                    continue
                counts = [g.count for g in job.groups]
                placer = req = None
                if not rejected(job, counts):
                    req = request_of(job, counts)
                    placer = Placer(state)
                    if not quota.check(state, state.queues[job.queue], req).fits:
                        placer = None
                    elif shape in last_failed and _still_fails(state, job, changed[last_failed[shape] :]):
                        placer = None
                        last_failed[shape] = len(changed)
                    elif not placer.place_gang(job, counts):
                        placer = None
                        if _one_domain_gang(job):
                            last_failed[shape] = len(changed)
                    else:
                        last_failed.pop(shape, None)
                        changed.extend(p.node_id for p in placer.taken)
                if placer is None or req is None:
                    failed.add(shape)
                    open_shapes -= 1
                else:
                    out[job.id] = t
                    started.add(job.id)
                    left_in_backlog[shape] -= 1
                    if not left_in_backlog[shape]:
                        del left_in_backlog[shape]
                    _usage(state, job.queue, req, +1)
                    planned.append((job, list(placer.taken), req))
                    live.add(len(planned) - 1)
                    runtime = job.estimated_runtime()
                    if runtime != INF:
                        heapq.heappush(heap, (t + runtime * scale_of(job.queue), job.seq, ~(len(planned) - 1)))
                    if not ahead[shape]:
                        open_shapes -= 1
                if not open_shapes:
                    break
            if started:
                pending = [job for job in pending if job.id not in started]
    finally:
        for i in sorted(live, reverse=True):
            job, taken, req = planned[i]
            state.unplace(job, taken)
            _usage(state, job.queue, req, -1)
        for job in reversed(released):
            _restore(state, job)
            _usage(state, job.queue, job.charged, +1)
    return out


class RuntimeModel(StrEnum):
    """How the start-time planner predicts a run time from the user's estimate."""

    #: one scale for everyone: the median of every finished run's time over its estimate
    CLUSTER = "cluster"
    #: each queue's own median once 16 of its runs have finished (its users' habit: a team that
    #: asks five times what it uses is read as such), the cluster's before
    QUEUE = "queue"


#: the planner's model (``bench/eta.py`` compares the two on the same jobs)
RUNTIME_MODEL = RuntimeModel.QUEUE


def runtime_scales(state: ClusterState) -> Callable[[str], float]:
    """Per queue, what the planner multiplies an estimate by (``RUNTIME_MODEL``). Only ETAs use
    it: reservations plan with the estimates themselves, upper bounds, so the promise holds."""
    cluster = state.runtime_scale()
    if RUNTIME_MODEL == RuntimeModel.CLUSTER:
        return lambda queue: cluster
    scales: dict[str, float] = {}

    def scale_of(queue: str) -> float:
        found = scales.get(queue)
        if found is None:
            found = scales[queue] = state.runtime_scale(queue)
        return found

    return scale_of


def _scaled_end(state: ClusterState, jid: int, end: float, scale: float) -> float:
    """When a running job should end, its estimated run time scaled by ``scale``."""
    if scale == 1.0:
        return end
    run = state.jobs[jid].current_run
    assert run is not None
    began = run.start if run.work_start is None else run.work_start
    return began + (end - began) * scale


def _one_domain_gang(job: Job) -> bool:
    """A gang of one group of whole-GPU pods that must all go in one topology domain: the
    placer's verdict is then a verdict per domain (``_still_fails``)."""
    if len(job.groups) != 1:
        return False
    g = job.groups[0]
    return g.topology_mode == TopologyMode.REQUIRED and g.topology_level is not None and g.whole_gpus > 0 and not g.share


def _still_fails(state: ClusterState, job: Job, changed: list[int]) -> bool:
    """Whether ``job``, a one-domain gang whose shape failed to place when only the nodes in
    ``changed`` have changed since, fails again, without running the placer over every domain.

    The placer (``Placer._place_group_topology``) tries each domain of the required level with
    enough whole GPUs free and room for the pods, and places the gang in the first that takes
    it. A domain none of whose nodes changed is as it was at the failure, so it fails again; the
    gang can only fit now in a domain holding a changed node. When none of those has the GPUs
    and the room, the placer would fail: True. Otherwise False, and the caller runs the placer.
    """
    g = job.groups[0]
    level = g.topology_level
    assert level is not None
    n = g.count
    need = g.whole_gpus * n
    nodes, domains = state.nodes, state.domains[level]
    placer = Placer(state)
    for d in {nodes[nid].domains[level] for nid in changed}:
        dom = domains[d]
        if dom.whole_free >= need and placer._domain_capacity(g, dom.node_ids, n) >= n:
            return False
    return True


def _usage(state: ClusterState, queue: str, amount: Vec, sign: int) -> None:
    usage = state.queues[queue].usage
    for r in range(3):
        usage[r] += sign * amount[r]
