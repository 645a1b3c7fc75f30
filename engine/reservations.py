"""Who holds the backfill reservation, and its plan from one cycle to the next.

``most_urgent_blocked`` picks the job a ``most-urgent`` reservation is for (usher's: blocked for
capacity in the last cycle, highest priority, then oldest; a holder keeps it while it is still so
blocked); ``reserve`` plans its start (``policy.backfill``), keeping the last cycle's plan while
it holds, so that a planned start never moves later while its nodes still free up in time.
"""

from __future__ import annotations

from itertools import islice

from .enums import PendingReason
from .policy.backfill import Reservation, cached_reservation, kept_reservation, plan_reservation
from .state import INF, ClusterState, Job

#: the reasons of a job blocked for capacity (what a reservation is for)
CAPACITY_REASONS = (PendingReason.INSUFFICIENT_CAPACITY, PendingReason.TOPOLOGY_UNSATISFIABLE)


def reserve(state: ClusterState, job: Job, counts: list[int], now: float) -> Reservation | None:
    """The backfill reservation for ``job``: the last cycle's plan while nothing started or
    stopped; else a new plan, unless it would start later than the last plan for the same job
    and that one still holds (``kept_reservation``): a reservation's start never moves later
    while its nodes still free up in time."""
    last = state.last_plan
    reservation = cached_reservation(last, state, job, now)
    if reservation is None:
        reservation = plan_reservation(state, job, counts, now)
        if last is not None and last.job_id == job.id and (reservation is None or reservation.start > last.start):
            reservation = kept_reservation(state, last, now) or reservation
        state.last_plan = reservation.fresh_copy() if reservation is not None else None
    return reservation


#: Pending jobs per queue that ``most_urgent_blocked`` looks at.
URGENT_SCAN = 256


#: why a reservation's holder may be waiting and still keep it
HOLDER_REASONS = (*CAPACITY_REASONS, PendingReason.WAITING_FOR_QUOTA)


def most_urgent_blocked(state: ClusterState) -> Job | None:
    """The job a ``most-urgent`` reservation is for: blocked for capacity in the last cycle,
    highest priority first, then the oldest (the first of each queue's pending order). The
    job holding the reservation keeps it while it is still so blocked, unless one of strictly
    higher priority is: an older job of its priority that comes to be blocked for capacity
    later does not take it over (the holder's planned start is a promise)."""
    best: Job | None = None
    best_key: tuple[int, float, int] | None = None
    if state.reservation is not None:
        holder = state.jobs[state.reservation[0]]
        # blocked by its quota now is no reason to drop it: the jobs ahead of it that hold that
        # quota end before its start, and those that would not are kept from it (``_holder_quota``)
        if holder._cell is not None and not holder.held and holder.pending_reason in HOLDER_REASONS:
            best, best_key = holder, (-holder.priority, -INF, 0)  # before every other job of its priority
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
