"""Preemption: the smallest set of running jobs to evict so that a pending job fits.

Candidates come only from where the preemptor's queue policy allows (Kueue's three knobs):

- ``withinQueue``: jobs of the same queue with lower priority (``LowerPriority``), or also equal
  priority submitted later (``LowerOrNewerEqualPriority``);
- ``reclaimWithinCohort``: when the preemptor stays within its nominal quota, jobs of other queues
  of its cohort that are borrowing (``Any``, or only ``LowerPriority``);
- ``borrowWithinCohort``: when the preemptor must borrow, lower-priority jobs of borrowing queues.

Jobs marked ``preemptible: false`` are never victims; a victim gang is always evicted whole.
Candidates are ordered as Kueue does, with our tie-break on lost work: other queues first (the
queue furthest above its fair share first), lower priority first, less work lost since the last
checkpoint first, most recently admitted first. They are removed one by one until the preemptor
fits; then a minimising pass puts back every victim that is not needed. Every check runs on the
state itself and is undone, so nothing changes unless the caller evicts the victims it is given.
"""

from __future__ import annotations

from ..enums import BorrowWithinCohort, ReclaimWithinCohort, WithinQueue
from ..state import ClusterState, Job, Vec
from . import quota
from .placement import Placer

MAX_CANDIDATES = 64


def _allowed(state: ClusterState, job: Job, victim: Job, borrowing: bool) -> bool:
    q = state.queues[job.queue]
    if victim.queue == job.queue:
        if q.within_queue == WithinQueue.LOWER_PRIORITY:
            return victim.priority < job.priority
        if q.within_queue == WithinQueue.LOWER_OR_NEWER_EQUAL_PRIORITY:
            return victim.priority < job.priority or (
                victim.priority == job.priority and (victim.submit, victim.seq) > (job.submit, job.seq)
            )
        return False
    vq = state.queues[victim.queue]
    if q.cohort is None or vq.cohort != q.cohort or not quota.is_borrowing(vq):
        return False
    if borrowing:
        return q.borrow_within_cohort == BorrowWithinCohort.LOWER_PRIORITY and victim.priority < job.priority
    if q.reclaim_within_cohort == ReclaimWithinCohort.ANY:
        return True
    if q.reclaim_within_cohort == ReclaimWithinCohort.LOWER_PRIORITY:
        return victim.priority < job.priority
    return False


def candidates(state: ClusterState, job: Job, request: Vec, now: float) -> list[Job]:
    """Running jobs the policy lets ``job`` preempt, best victims first."""
    q = state.queues[job.queue]
    borrowing = quota.needs_borrowing(q, request)
    out = [
        v
        for v in (state.jobs[j] for j in state.running)
        if v.preemptible and v.id != job.id and _allowed(state, job, v, borrowing)
    ]
    out.sort(
        key=lambda v: (
            v.queue == job.queue,
            -quota.dominant_share(state, state.queues[v.queue]),
            v.priority,
            v.work_at_risk(now),
            -v.admitted_seq,
        )
    )
    return out[:MAX_CANDIDATES]


def _lift(state: ClusterState, v: Job) -> None:
    run = v.current_run
    assert run is not None
    state.unplace(v, run.placements)
    state.uncharge(v)


def _drop(state: ClusterState, v: Job, charged: Vec) -> None:
    run = v.current_run
    assert run is not None
    state.place(v, run.placements)
    state.charge(v, charged)


def _fits(state: ClusterState, job: Job, counts: list[int], request: Vec) -> bool:
    if not quota.check(state, state.queues[job.queue], request).fits:
        return False
    placer = Placer(state)
    if placer.place_gang(job, counts):
        placer.undo(job)
        return True
    return False


def find_victims(state: ClusterState, job: Job, counts: list[int], request: Vec, now: float) -> list[Job] | None:
    """A minimal list of jobs whose eviction lets ``job`` fit, or None when none does."""
    cands = candidates(state, job, request, now)
    if not cands:
        return None
    charged = {v.id: v.charged for v in cands}
    lifted: list[Job] = []
    found = False
    for v in cands:
        _lift(state, v)
        lifted.append(v)
        if _fits(state, job, counts, request):
            found = True
            break
    if not found:
        for v in reversed(lifted):
            _drop(state, v, charged[v.id])
        return None
    # Minimising pass: put back each victim (last chosen first) that the preemptor can spare.
    needed: list[Job] = []
    for v in reversed(lifted[:-1]):
        _drop(state, v, charged[v.id])
        if not _fits(state, job, counts, request):
            _lift(state, v)
            needed.append(v)
    needed.append(lifted[-1])
    for v in needed:
        _drop(state, v, charged[v.id])
    return list(reversed(needed))
