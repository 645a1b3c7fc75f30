"""One scheduling cycle: the state in, decisions out (bind, evict), reasons on every pending job.

The cycle walks pending jobs in admission order (``policy.ordering``). For each it checks, in
order: hold and approval; quota (``policy.quota``), with preemption when the queue's policy allows
reclaiming; placement of the whole gang (``policy.placement``), honouring the backfill
reservation; preemption for capacity; and finally records why the job waits. One blocked job
gets the backfill reservation (``policy.backfill``): with ``reserve_for: first-blocked`` the first
the cycle finds blocked for capacity; with ``most-urgent`` (usher's) the job that was blocked for
capacity in the last cycle with the highest priority, then the oldest, planned before the walk;
when its planned start comes, the room is kept for it ahead of the fair-share order. Fair share
alone would never reserve for a big gang, whose queue's share after admitting it sorts it last. As in Kueue, only the first blocked job of each queue may preempt in a cycle (the queue's
head as far as this cycle goes). Without gang admission the cycle is ``podcycle``'s instead.

Placements are *reserved* on the state as the cycle goes (later jobs see the capacity taken), and
returned as ``Bind`` decisions. A backend that cannot carry one out hands it back to
``Engine.unbind``, which undoes the reservation (the framework's Unreserve).

Work is bounded by shape: once a gang shape has failed to place in a cycle, later jobs of the same
shape are not tried again, since capacity only shrinks during a cycle (unless a preemption frees
some, which clears the memo).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice

from .admission import Admitter, CycleResult, mark_waiting
from .enums import Approval, EndReason, PendingReason
from .podcycle import run_pod_cycle
from .policy import quota
from .policy.backfill import (
    Reservation,
    cached_reservation,
    plan_reservation,
    quick_reject,
    reservation_now,
)
from .policy.ordering import AdmissionOrder
from .policy.placement import Placer, classify_failure, gang_counts, request_of
from .policy.preemption import find_victims
from .policy.registry import Backfill, Policy, ReserveFor
from .state import ClusterState, Job, Vec

CAPACITY_REASONS = (PendingReason.INSUFFICIENT_CAPACITY, PendingReason.TOPOLOGY_UNSATISFIABLE)


@dataclass(slots=True, frozen=True)
class Attempt:
    """One way the cycle tries to admit a job: the full gang, or its ``minCount`` gang."""

    counts: tuple[int, ...]
    request: Vec
    #: memo keys: quota verdicts by (queue, request); preemption by (queue, priority, request,
    #: groups); placement by (groups, counts)
    quota_key: tuple
    preempt_key: tuple
    shape: tuple


def attempts_of(state: ClusterState, job: Job) -> tuple[Attempt, ...]:
    """The attempts for ``job``, computed once per job (while its groups stay the same)."""
    cached = state.attempt_plans.get(job.id)
    if cached is not None and cached[0] is job.groups and cached[1] == job.min_count:
        return cached[2]
    out = []
    shapes = [gang_counts(job, False)]
    if job.min_count < job.total_pods:
        shapes.append(gang_counts(job, True))
    for counts in shapes:
        request = request_of(job, counts)
        out.append(
            Attempt(
                tuple(counts),
                request,
                (job.queue, request),
                (job.queue, job.priority, request, job.groups),
                (job.groups, tuple(counts)),
            )
        )
    plan = tuple(out)
    state.attempt_plans[job.id] = (job.groups, job.min_count, plan)
    return plan


def run_cycle(state: ClusterState, now: float, policy: Policy, engine: Admitter) -> CycleResult:
    if not policy.gang:
        return run_pod_cycle(state, now, policy, engine)
    result = CycleResult()
    order = AdmissionOrder(state, fair_share=policy.fair_share)
    failed_shapes: dict[tuple, PendingReason] = {}
    failed_quota: dict[tuple, PendingReason] = {}
    #: quota checks that passed since the last admission (usage only grows between admissions)
    passed_quota: set[tuple] = set()
    failed_preempt: set[tuple] = set()
    #: queues whose first blocked job already had its preemption attempt this cycle
    tried_preempt: set[str] = set()
    reservation: Reservation | None = None
    if policy.backfill == Backfill.EASY and policy.reserve_for == ReserveFor.MOST_URGENT:
        holder = most_urgent_blocked(state)
        if holder is not None:
            counts = gang_counts(holder, False)
            # A reservation that has come due is honoured: when the room it waited for is there,
            # it is kept for the holder against the jobs the fair-share order puts first.
            due = state.reservation is not None and state.reservation[0] == holder.id and state.reservation[1] <= now
            reservation = (reservation_now(state, holder, counts, now) if due else None) or _reserve(
                state, holder, counts, now
            )
    queues = state.queues
    preemption = policy.preemption
    borrowing = policy.borrowing
    for job in order:
        queue = queues[job.queue]
        if job.held:
            mark_waiting(job, PendingReason.HELD)
            continue
        if queue.approval == Approval.MANUAL and not job.approved:
            mark_waiting(job, PendingReason.AWAITING_APPROVAL)
            continue
        guarded = (
            reservation is not None
            and job.id != reservation.job_id
            and now + job.estimated_runtime() > reservation.start
        )
        guard = reservation.guard if guarded and reservation is not None else None
        attempts = attempts_of(state, job)
        reason: PendingReason | None = None
        admitted = False
        for attempt in attempts:
            counts = list(attempt.counts)
            request = attempt.request
            qkey = attempt.quota_key
            verdict_reason = failed_quota.get(qkey)
            if verdict_reason is None and qkey not in passed_quota:
                verdict_reason = quota.check(state, queue, request, borrowing).reason
                if verdict_reason is None:
                    passed_quota.add(qkey)
            if verdict_reason is not None:
                failed_quota[qkey] = verdict_reason
                pkey = attempt.preempt_key
                if (
                    verdict_reason == PendingReason.WAITING_FOR_QUOTA
                    and preemption
                    and job.queue not in tried_preempt
                    and pkey not in failed_preempt
                ):
                    tried_preempt.add(job.queue)
                    failed_preempt.add(pkey)
                    if _preempt_for(state, job, counts, request, now, engine, result):
                        failed_quota.clear()
                        failed_shapes.clear()
                        failed_preempt.clear()
                        passed_quota.clear()
                        admitted = True
                        break
                reason = verdict_reason if reason is None else reason
                continue
            shape = (attempt.shape, guard is not None)
            cached = failed_shapes.get(shape)
            if cached is None:
                if not quick_reject(state, job, counts):
                    placer = Placer(state, guard, scoring=policy.scoring)
                    if placer.place_gang(job, counts):
                        engine.admit(job, placer.taken, request, now, result)
                        passed_quota.clear()
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
            pkey = attempt.preempt_key
            if preemption and cached in CAPACITY_REASONS and job.queue not in tried_preempt and pkey not in failed_preempt:
                tried_preempt.add(job.queue)
                failed_preempt.add(pkey)
                if _preempt_for(state, job, counts, request, now, engine, result):
                    failed_quota.clear()
                    failed_shapes.clear()
                    failed_preempt.clear()
                    passed_quota.clear()
                    admitted = True
                    break
            reason = cached if reason is None else reason
        if admitted:
            if reservation is not None and reservation.job_id == job.id:
                reservation = None  # the holder started: nothing to hold back for the rest
            continue
        assert reason is not None
        mark_waiting(job, reason)
        if policy.strict_fifo:
            order.block(job.queue)
        if (
            reservation is None
            and policy.backfill == Backfill.EASY
            and policy.reserve_for == ReserveFor.FIRST_BLOCKED
            and reason in CAPACITY_REASONS
        ):
            reservation = _reserve(state, job, list(attempts[0].counts), now)
    result.reservation = reservation
    state.reservation = (reservation.job_id, reservation.start) if reservation else None
    return result


def _reserve(state: ClusterState, job: Job, counts: list[int], now: float) -> Reservation | None:
    """The backfill reservation for ``job``: the last cycle's plan while still valid, else a new one."""
    reservation = cached_reservation(state.last_plan, state, job, now)
    if reservation is None:
        reservation = plan_reservation(state, job, counts, now)
        state.last_plan = reservation.fresh_copy() if reservation is not None else None
    return reservation


#: Pending jobs per queue that ``most_urgent_blocked`` looks at.
URGENT_SCAN = 256


def most_urgent_blocked(state: ClusterState) -> Job | None:
    """The job a ``most-urgent`` reservation is for: blocked for capacity in the last cycle,
    highest priority first, then the oldest (the first of each queue's pending order)."""
    best: Job | None = None
    best_key: tuple[int, float, int] | None = None
    for queue in state.queues.values():
        for entry in islice(queue.pending, URGENT_SCAN):
            key = (entry[0], entry[1], entry[2])
            if best_key is not None and key >= best_key:
                break
            job = state.jobs[entry[3]]
            if job.pending_reason in CAPACITY_REASONS and not job.held:
                best, best_key = job, key
                break
    return best


def _preempt_for(
    state: ClusterState, job: Job, counts: list[int], request: Vec, now: float, engine: Admitter, result: CycleResult
) -> bool:
    victims = find_victims(state, job, counts, request, now)
    if not victims:
        return False
    for v in victims:
        engine.stop(v, now, EndReason.PREEMPTED, by=job.name, result=result)
    placer = Placer(state)
    if not placer.place_gang(job, counts):  # cannot happen: find_victims checked it
        return False
    engine.admit(job, placer.taken, request, now, result)
    return True
