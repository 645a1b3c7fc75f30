"""Who holds the backfill reservation, and its plan from one cycle to the next.

``most_urgent_blocked`` picks the job a ``most-urgent`` reservation is for (usher's: blocked in
the last cycle, highest priority, then oldest; a holder keeps it while it is still blocked);
``reserve`` plans its start (``policy.backfill``), keeping the last cycle's plan while it holds,
so that a planned start never moves later while its nodes still free up in time. ``held`` and
``would_delay_quota`` put the reservation in a user's terms (the console, ``explain``).

*Blocked* is by whatever a job waits for that running jobs will give back: capacity, or the
quota of its queue or of the cohort it borrows from (``BLOCKED_REASONS``). A job that waits for
quota and holds no reservation is passed by every smaller job of its queue as the quota frees,
one after another, and may wait for ever (head-of-line starvation, as under Kueue's
BestEffortFIFO); holding one, its planned start counts the quota's release as well as the
nodes', and later jobs that would run past it must leave it both.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice

from .enums import PendingReason
from .policy import quota
from .policy.backfill import Reservation, cached_reservation, kept_reservation, plan_reservation
from .policy.placement import gang_counts, request_of
from .state import INF, MILLI, ClusterState, Job, lost_to_a_node

#: the reasons of a job blocked for capacity
CAPACITY_REASONS = (PendingReason.INSUFFICIENT_CAPACITY, PendingReason.TOPOLOGY_UNSATISFIABLE)
#: the reasons of a job a reservation is for: blocked for capacity, or for quota (its queue's
#: or its cohort's) that running jobs will give back (``ExceedsQuota`` never frees: no plan)
BLOCKED_REASONS = (*CAPACITY_REASONS, PendingReason.WAITING_FOR_QUOTA)


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


def knocked_out(job: Job, holder: Job) -> bool:
    """Whether ``job`` lost its last run to a node's failure or drain and is ahead of the
    reservation's ``holder`` by the policy's urgency (higher priority, or as high and submitted
    first). It is no later job: the reservation does not hold it back, placed or preempting (a
    failure or a drain is among what may move a reservation)."""
    if not lost_to_a_node(job):
        return False
    return (-job.priority, job.submit, job.seq) < (-holder.priority, holder.submit, holder.seq)


def held_back(job: Job, reservation: Reservation | None, jobs: list[Job], now: float) -> bool:
    """Whether the reservation holds ``job`` back (the guard and the holder's quota apply): a job
    other than the holder that would run past its start, unless ``knocked_out``."""
    if reservation is None or job.id == reservation.job_id or now + job.estimated_runtime() <= reservation.start:
        return False
    return not (job.runs and knocked_out(job, jobs[reservation.job_id]))


def most_urgent_blocked(state: ClusterState) -> Job | None:
    """The job a ``most-urgent`` reservation is for: blocked (for capacity or quota,
    ``BLOCKED_REASONS``) in the last cycle, highest priority first, then the oldest (the first
    of each queue's pending order). The job holding the reservation keeps it while it is still
    blocked, unless one of strictly higher priority is: an older job of its priority that comes
    to be blocked later does not take it over (the holder's planned start is a promise)."""
    best: Job | None = None
    best_key: tuple[int, float, int] | None = None
    if state.reservation is not None:
        holder = state.jobs[state.reservation[0]]
        # the jobs that hold the quota or nodes it waits for end before its start, and those that
        # would not are kept from them (the guard, and ``_holder_quota`` in the cycle)
        if holder._cell is not None and not holder.held and holder.pending_reason in BLOCKED_REASONS:
            best, best_key = holder, (-holder.priority, -INF, 0)  # before every other job of its priority
    for queue in state.queues.values():
        for entry in islice(queue.pending, URGENT_SCAN):
            key = (entry[0], entry[1], entry[2])
            if best_key is not None and key >= best_key:
                break
            job = state.jobs[entry[3]]
            if job.pending_reason in BLOCKED_REASONS and not job.held:
                best, best_key = job, key
                break
    return best


@dataclass(slots=True, frozen=True)
class Held:
    """What the reservation holds for its holder, in a user's terms (the console's job details)."""

    holder: str
    start: float
    #: GPUs the holder asks (whole and shares, in GPUs)
    gpus: float
    #: the queue whose quota is kept for it (``limited``: it has a GPU quota at all), and the
    #: cohort it borrows from (if any)
    queue: str
    limited: bool
    cohort: str | None
    #: the nodes its planned start keeps room on (empty when not known this cycle)
    nodes: tuple[str, ...]


def held(state: ClusterState) -> Held | None:
    """What the current reservation holds; None when no job holds one."""
    if state.reservation is None:
        return None
    holder_id, start = state.reservation
    holder = state.jobs[holder_id]
    request = request_of(holder, gang_counts(holder, False))
    plan = state.last_plan
    nodes = tuple(state.nodes[n].name for n in sorted(plan.takes)) if plan is not None and plan.job_id == holder_id else ()
    queue = state.queues[holder.queue]
    return Held(holder.name, start, request[0] / MILLI, holder.queue, queue.nominal[0] != INF, queue.cohort, nodes)


def would_delay_quota(state: ClusterState, job: Job) -> bool:
    """Whether ``job``, started now and running past the reservation's start, would take quota
    its holder needs then (else, held back, it would take the holder's room on its nodes)."""
    if state.reservation is None:
        return False
    holder = state.jobs[state.reservation[0]]
    if holder.current_run is not None or not quota.shares_quota(state, job.queue, holder.queue):
        return False
    request = request_of(job, gang_counts(job, False))
    holder_request = request_of(holder, gang_counts(holder, False))
    held = quota.HeldQuota(state.queues[holder.queue], holder_request, state.reservation[1])
    return not quota.fits_at_start(state, state.queues[job.queue], request, True, held)
