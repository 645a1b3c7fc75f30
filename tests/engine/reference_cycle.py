"""The gang cycle as it was before issue 14 made it incremental: every pending job visited in
admission order, every share computed afresh, every preemption search done in full (all
candidates sorted, no memory across cycles). Kept only as the reference the fast cycle must agree
with, decision for decision and reason for reason (``test_cycle_equivalence``).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from usher.engine.admission import Admitter, CycleResult, mark_waiting
from usher.engine.cycle import BLOCKED_REASONS, CAPACITY_REASONS, _reserve, most_urgent_blocked
from usher.engine.reservations import held_back
from usher.engine.enums import Approval, EndReason, MoveMode, PendingReason
from usher.engine.policy import quota
from usher.engine.policy.backfill import Reservation, quick_reject, reservation_now
from usher.engine.policy.consolidation import carry_out, consolidation_for, return_to_kept_rooms
from usher.engine.policy.placement import (
    Guard,
    Placer,
    classify_failure,
    gang_counts,
    request_of,
)
from usher.engine.policy.preemption import (
    MAX_CANDIDATES,
    Rule,
    _passes,
    lift_victim,
    queue_rule,
    restore_victim,
)
from usher.engine.policy.registry import Backfill, Policy, ReserveFor
from usher.engine.state import ClusterState, Job, Vec


def plain_order(state: ClusterState, fair_share: bool, blocked: set[str]) -> Iterator[Job]:
    """Admission order with a heap of queue heads, each popped head's key computed again."""
    snapshots = {name: list(q.pending) for name, q in state.queues.items() if q.pending}

    def key(name: str, idx: int) -> tuple:
        prio, submit, seq, jid = snapshots[name][idx]
        share = quota.dominant_share(state, state.queues[name], state.jobs[jid].request) if fair_share else 0.0
        return (share, prio, submit, seq, name, idx)

    heap = [key(name, 0) for name in snapshots]
    heapq.heapify(heap)
    while heap:
        top = heapq.heappop(heap)
        name, idx = top[4], top[5]
        if name in blocked:
            continue
        if fair_share:
            fresh = key(name, idx)
            if fresh[0] > top[0] and heap and fresh > heap[0]:
                heapq.heappush(heap, fresh)
                continue
        if idx + 1 < len(snapshots[name]):
            heapq.heappush(heap, key(name, idx + 1))
        yield state.jobs[snapshots[name][idx][3]]


def full_search(
    state: ClusterState,
    job: Job,
    counts: list[int],
    request: Vec,
    now: float,
    guard: Guard | None = None,
    beside: quota.HeldQuota | None = None,
) -> list[Job] | None:
    """Victims for ``job``: every allowed running job sorted, the first 64 lifted one by one;
    placed within ``guard`` and leaving ``beside`` (the holder's queue, request and start) its quota then, if given."""
    q = state.queues[job.queue]
    borrowing = quota.needs_borrowing(q, request)
    cands: list[Job] = []
    for name, ids in state.running_by_queue.items():
        rule = queue_rule(state, job, state.queues[name], borrowing) if ids else Rule.NONE
        if rule == Rule.NONE:
            continue
        for jid in ids:
            v = state.jobs[jid]
            if not v.shielded and _passes(rule, job, v) and v.runs[-1].start < now:
                cands.append(v)
    if not cands:
        return None
    shares = {name: quota.dominant_share(state, state.queues[name]) for name in {v.queue for v in cands}}
    cands.sort(key=lambda v: (v.queue == job.queue, -shares[v.queue], v.priority, v.work_at_risk(now), -v.admitted_seq))
    cands = cands[:MAX_CANDIDATES]
    charged = {v.id: v.charged for v in cands}

    def fits() -> bool:
        if not quota.check(state, q, request).fits:
            return False
        if beside is not None and not quota.fits_at_start(state, q, request, True, beside):
            return False
        placer = Placer(state, guard)
        if placer.place_gang(job, counts):
            placer.undo(job)
            return True
        return False

    lifted: list[Job] = []
    for v in cands:
        lift_victim(state, v)
        lifted.append(v)
        if fits():
            break
    else:
        for v in reversed(lifted):
            restore_victim(state, v, charged[v.id])
        return None
    needed: list[Job] = []
    for v in reversed(lifted[:-1]):
        restore_victim(state, v, charged[v.id])
        if not fits():
            lift_victim(state, v)
            needed.append(v)
    needed.append(lifted[-1])
    for v in needed:
        restore_victim(state, v, charged[v.id])
    return list(reversed(needed))


def reference_cycle(state: ClusterState, now: float, policy: Policy, engine: Admitter) -> CycleResult:
    """One gang cycle, job by job (``policy.gang`` must be on)."""
    assert policy.gang  # the pod-by-pod cycle has no fast path to check
    result = CycleResult()
    blocked: set[str] = set()
    failed_shapes: dict[tuple, PendingReason] = {}
    failed_quota: dict[tuple, PendingReason] = {}
    failed_preempt: set[tuple] = set()
    tried_preempt: set[str] = set()
    reservation: Reservation | None = None
    if state.kept_rooms:
        return_to_kept_rooms(state, engine, now, result)
    consolidating = policy.consolidation and engine.moves != MoveMode.NEVER

    def consolidate(urgent: Job) -> bool:
        found = consolidation_for(state, urgent, now, policy)
        if found is not None:
            carry_out(found, urgent, state, engine, now, result)
        return found is not None

    tried = most_urgent_blocked(state) if consolidating else None
    if tried is not None:
        consolidate(tried)
    if policy.backfill == Backfill.EASY:
        holder = most_urgent_blocked(state)
        if policy.reserve_for == ReserveFor.FIRST_BLOCKED and (
            holder is None or state.reservation is None or holder.id != state.reservation[0]
        ):
            holder = None
        if holder is not None:
            counts = gang_counts(holder, False)
            due = state.reservation is not None and state.reservation[0] == holder.id and state.reservation[1] <= now
            reservation = (reservation_now(state, holder, counts, now) if due else None) or _reserve(state, holder, counts, now)

    def may_preempt(job: Job, pkey: tuple) -> bool:
        """The first blocked job of its queue, of a kind that has not tried yet."""
        return policy.preemption and job.queue not in tried_preempt and pkey not in failed_preempt

    def preempt_for(job: Job, counts: list[int], request: Vec, pkey: tuple, guard: Guard | None, beside: quota.HeldQuota | None) -> bool:
        tried_preempt.add(job.queue)
        failed_preempt.add(pkey)
        if guard is not None and reservation is not None and job.priority > state.jobs[reservation.job_id].priority:
            guard = beside = None  # it outranks the holder: it may move the reservation
        victims = full_search(state, job, counts, request, now, guard, beside)
        if not victims:
            return False
        failed_quota.clear()
        failed_shapes.clear()
        failed_preempt.clear()
        for v in victims:
            engine.stop(v, now, EndReason.PREEMPTED, by=job.name, result=result)
        placer = Placer(state, guard)
        assert placer.place_gang(job, counts)
        engine.admit(job, placer.taken, request, now, result)
        return True

    for job in plain_order(state, policy.fair_share, blocked):
        queue = state.queues[job.queue]
        if job.held:
            mark_waiting(job, PendingReason.HELD)
            continue
        if queue.approval == Approval.MANUAL and not job.approved:
            mark_waiting(job, PendingReason.AWAITING_APPROVAL)
            continue
        long_run = held_back(job, reservation, state.jobs, now)
        guard = reservation.guard if long_run and reservation is not None else None
        attempts = [gang_counts(job, False)]
        if job.min_count < job.total_pods:
            attempts.append(gang_counts(job, True))
        reason: PendingReason | None = None
        admitted = False
        holder = state.jobs[reservation.job_id] if guard is not None and reservation is not None else None
        beside = holder is not None and holder.current_run is None and quota.shares_quota(state, job.queue, holder.queue)
        holder_quota = (
            quota.HeldQuota(state.queues[holder.queue], request_of(holder, gang_counts(holder, False)), reservation.start)
            if beside and holder is not None and reservation is not None
            else None
        )
        for counts in attempts:
            request = request_of(job, counts)
            pkey = (job.queue, job.priority, request, job.groups)
            qkey = (job.queue, request, False)
            verdict = failed_quota.get(qkey) or quota.check(state, queue, request, policy.borrowing).reason
            if verdict is None and beside:
                assert holder is not None
                qkey = (job.queue, request, True)
                assert holder_quota is not None
                verdict = failed_quota.get(qkey)
                if verdict is None and not quota.fits_at_start(state, queue, request, policy.borrowing, holder_quota):
                    verdict = PendingReason.RESERVED_FOR_HIGHER_PRIORITY
            if verdict is not None:
                failed_quota[qkey] = verdict
                if verdict == PendingReason.WAITING_FOR_QUOTA and may_preempt(job, pkey) and preempt_for(job, counts, request, pkey, guard, holder_quota):
                    admitted = True
                    break
                reason = reason or verdict
                continue
            shape = (job.groups, tuple(counts), guard is not None)
            cached = failed_shapes.get(shape)
            if cached is None:
                if not quick_reject(state, job, counts):
                    placer = Placer(state, guard, scoring=policy.scoring)
                    if placer.place_gang(job, counts):
                        engine.admit(job, placer.taken, request, now, result)
                        admitted = True
                        break
                if guard is not None:
                    free_placer = Placer(state)
                    if free_placer.place_gang(job, counts):
                        free_placer.undo(job)
                        cached = PendingReason.RESERVED_FOR_HIGHER_PRIORITY
                if cached is None:
                    cached = classify_failure(state, job, counts)
                failed_shapes[shape] = cached
            if cached in CAPACITY_REASONS and may_preempt(job, pkey) and preempt_for(job, counts, request, pkey, guard, holder_quota):
                admitted = True
                break

            reason = reason or cached
        if admitted:
            if reservation is not None and reservation.job_id == job.id:
                reservation = None
                for key in [k for k in failed_quota if k[2]]:
                    del failed_quota[key]  # worked out beside the holder that just started
            continue
        assert reason is not None
        mark_waiting(job, reason)
        if policy.strict_fifo:
            blocked.add(job.queue)
        if reservation is None and policy.backfill == Backfill.EASY and policy.reserve_for == ReserveFor.FIRST_BLOCKED and reason in BLOCKED_REASONS:
            reservation = _reserve(state, job, attempts[0], now)
    if consolidating:
        urgent = most_urgent_blocked(state)
        holder = reservation.job_id if reservation is not None else None
        if urgent is not None and urgent is not tried and holder in (None, urgent.id) and consolidate(urgent):
            reservation = None
    result.reservation = reservation
    state.reservation = (reservation.job_id, reservation.start) if reservation else None
    return result
