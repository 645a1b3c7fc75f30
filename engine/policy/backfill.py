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
for the report and the console. It works on the state in place and undoes everything.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from ..enums import TopologyMode
from ..state import INF, ClusterState, Job, Vec
from . import quota
from .placement import Guard, Placer, node_allowed, pods_fitting_by_gpus, request_of

#: Pending jobs the start-time planner looks at; later ones get no estimate.
PLAN_DEPTH = 2000


@dataclass(slots=True)
class Reservation:
    job_id: int
    start: float
    guard: Guard
    #: (admissions, stops) of the state it was planned on: while both are unchanged, so is the plan
    epoch: tuple[int, int] = (0, 0)

    def fresh_copy(self) -> Reservation:
        """The same plan with a guard that has not been drawn on yet."""
        return Reservation(self.job_id, self.start, Guard({k: list(v) for k, v in self.guard.headroom.items()}), self.epoch)


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
            if max((d.whole_free for d in state.domains[g.topology_level]), default=0) < w:
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
    never late except for GPUs shared between jobs, so the caller still checks by placing.
    Returns 0 for gangs it does not model, None when the gang never fits by the estimates.
    """
    if len(job.groups) != 1 or not job.groups[0].whole_gpus:
        return 0
    g = job.groups[0]
    n, w = counts[0], g.whole_gpus
    nodes = state.nodes
    level = g.topology_level if g.topology_mode == TopologyMode.REQUIRED else None
    tally: dict[int, list[int]] = {}

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
            before = pods_on(nid)
            t = tally.get(nid)
            if t is None:
                node = nodes[nid]
                t = tally[nid] = [node.whole_free, node.cpu_free, node.mem_free]
            t[0] += 0 if p.share else len(p.gpus)
            t[1] += p.cpu
            t[2] += p.memory
            delta = pods_on(nid) - before
            total += delta
            if level is not None:
                domain_fit[nodes[nid].domains[level]] += delta
        if i + 1 < len(ends) and ends[i + 1][0] == end:
            continue
        if total >= n and (level is None or max(domain_fit.values(), default=0) >= n):
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
    placer.undo(job)
    return Reservation(job.id, now, Guard(headroom), (state.admit_counter, state.stop_counter))


def plan_reservation(state: ClusterState, job: Job, counts: list[int], now: float) -> Reservation | None:
    """Where and when ``job`` could start if running jobs end as estimated; None if never."""
    ends = state.ends
    first = _first_step(state, job, counts)
    if first is None:
        return None
    released: list[Job] = []
    found: Reservation | None = None
    for i, (end, _, jid) in enumerate(ends):
        if end == INF:
            break
        end = max(end, now)
        v = state.jobs[jid]
        _release(state, v)
        released.append(v)
        if i < first or (i + 1 < len(ends) and max(ends[i + 1][0], now) == end):
            continue
        if quick_reject(state, job, counts):
            continue
        placer = Placer(state)
        if placer.place_gang(job, counts):
            headroom = _headroom(state, placer)
            placer.undo(job)
            found = Reservation(job.id, end, Guard(headroom), (state.admit_counter, state.stop_counter))
            break
    for v in reversed(released):
        _restore(state, v)
    return found


def estimate_starts(state: ClusterState, order: list[Job], now: float) -> dict[int, float]:
    """Planned start of each job in ``order`` (pending jobs, admission order) that will start."""
    out: dict[int, float] = {}
    pending = order[:PLAN_DEPTH]
    if not pending:
        return out
    # heap entries: (time, tie-break, running job id or ~index into ``planned``)
    heap = [(max(end, now), seq, j) for end, seq, j in state.ends if end != INF]
    released: list[Job] = []
    planned: list[tuple[Job, list, Vec]] = []
    live: set[int] = set()
    reservation = state.reservation
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
                else:
                    job, taken, req = planned[~ref]
                    state.unplace(job, taken)
                    _usage(state, job.queue, req, -1)
                    live.discard(~ref)
            failed: set[tuple] = set()
            still: list[Job] = []
            for job in pending:
                counts = [g.count for g in job.groups]
                shape = (job.queue, job.groups)
                waiting = reservation is not None and reservation[0] == job.id and t < reservation[1]
                if waiting or shape in failed or quick_reject(state, job, counts):
                    still.append(job)
                    continue
                req = request_of(job, counts)
                placer = Placer(state)
                if not quota.check(state, state.queues[job.queue], req).fits or not placer.place_gang(job, counts):
                    failed.add(shape)
                    still.append(job)
                    continue
                out[job.id] = t
                _usage(state, job.queue, req, +1)
                planned.append((job, list(placer.taken), req))
                live.add(len(planned) - 1)
                runtime = job.estimated_runtime()
                if runtime != INF:
                    heapq.heappush(heap, (t + runtime, job.seq, ~(len(planned) - 1)))
            pending = still
    finally:
        for i in sorted(live, reverse=True):
            job, taken, req = planned[i]
            state.unplace(job, taken)
            _usage(state, job.queue, req, -1)
        for job in reversed(released):
            _restore(state, job)
            _usage(state, job.queue, job.charged, +1)
    return out


def _usage(state: ClusterState, queue: str, amount: Vec, sign: int) -> None:
    usage = state.queues[queue].usage
    for r in range(3):
        usage[r] += sign * amount[r]
