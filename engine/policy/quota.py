"""Quota and cohort accounting (Kueue's ClusterQueue model), and fair share.

Per resource, a queue's nominal quota splits into a *guaranteed* part (nominal minus its lending
limit, never lent) and a *lendable* part pooled in its cohort. A queue may use its guaranteed part
freely; anything above that comes out of the cohort pool, which is the sum of every member's
lendable part. A queue's total is also capped by nominal plus its borrowing limit.

So a job fits its queue when, for every resource with a limit:

- ``usage + request <= nominal + borrowingLimit`` (the queue's own ceiling), and
- the cohort's use of the pool after admission stays within the pool, where each member uses
  ``max(0, usage - guaranteed)`` of it.

When it does not fit now but would fit an empty cohort it is ``WaitingForQuota``; when it could
never fit (bigger than nominal plus everything it could ever borrow) it is ``ExceedsQuota``.

Fair share is the dominant resource share: the largest fraction of the cohort's nominal quota
(or the cluster, for a queue alone) that the queue uses, divided by its weight.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..enums import PendingReason
from ..memo import memo_of
from ..state import INF, RESOURCE_NAMES, ClusterState, Job, Queue, Vec


@dataclass(slots=True, frozen=True)
class QuotaVerdict:
    """The outcome of a quota check: ``reason`` is None when the request fits."""

    reason: PendingReason | None
    resource: str = ""
    asked: float = 0.0
    available: float = 0.0
    ceiling: float = 0.0

    @property
    def fits(self) -> bool:
        return self.reason is None


FITS = QuotaVerdict(None)


def pool_capacity(state: ClusterState, cohort: str, r: int) -> float:
    """What the cohort's members lend together for resource ``r``."""
    pools = memo_of(state).quotas(state).pools
    cached = pools.get((cohort, r))
    if cached is not None:
        return cached
    total = 0.0
    for name in state.cohorts[cohort]:
        q = state.queues[name]
        if q.nominal[r] == INF:
            continue
        total += min(q.lending_limit[r], q.nominal[r])
    pools[(cohort, r)] = total
    return total


def pool_usage(state: ClusterState, cohort: str, r: int) -> float:
    """How much of the cohort pool its members use for resource ``r``."""
    used = 0.0
    for name in state.cohorts[cohort]:
        q = state.queues[name]
        if q.nominal[r] == INF:
            continue
        used += max(0.0, q.usage[r] - q.guaranteed[r])
    return used


def ceiling(state: ClusterState, q: Queue, r: int) -> float:
    """The most queue ``q`` could ever hold of resource ``r`` (nominal plus all it may borrow)."""
    if q.nominal[r] == INF:
        return INF
    own = q.nominal[r] + q.borrowing_limit[r]
    if q.cohort is None:
        return q.nominal[r]
    others = pool_capacity(state, q.cohort, r) - min(q.lending_limit[r], q.nominal[r])
    return min(own, q.nominal[r] + others)


def check(state: ClusterState, queue: Queue, request: Vec, borrowing: bool = True) -> QuotaVerdict:
    """Does ``request`` fit ``queue`` now? Names the first resource that does not.

    With ``borrowing`` False the queue's ceiling is its nominal quota (a namespace
    ResourceQuota): nobody borrows, so the cohort pool can never run short either.
    """
    for r in range(3):
        ask = request[r]
        if ask == 0:
            continue
        nominal = queue.nominal[r]
        if nominal == INF:
            continue
        top = ceiling(state, queue, r) if borrowing else nominal
        after = queue.usage[r] + ask
        if ask > top:
            return QuotaVerdict(PendingReason.EXCEEDS_QUOTA, RESOURCE_NAMES[r], ask, top, top)
        if after > top:
            return QuotaVerdict(
                PendingReason.WAITING_FOR_QUOTA, RESOURCE_NAMES[r], ask, max(0.0, top - queue.usage[r]), top
            )
        if queue.cohort is None or not borrowing:
            continue
        g = queue.guaranteed[r]
        if after <= g:
            continue
        pool = pool_capacity(state, queue.cohort, r)
        used = pool_usage(state, queue.cohort, r)
        mine_now = max(0.0, queue.usage[r] - g)
        mine_after = after - g
        if used - mine_now + mine_after > pool:
            free_to_me = max(0.0, g - queue.usage[r]) + max(0.0, pool - used)
            return QuotaVerdict(PendingReason.WAITING_FOR_QUOTA, RESOURCE_NAMES[r], ask, free_to_me, top)
    return FITS


def shares_quota(state: ClusterState, a: str, b: str) -> bool:
    """Whether queues ``a`` and ``b`` draw on the same quota (one queue, or one cohort)."""
    if a == b:
        return True
    cohort = state.queues[a].cohort
    return cohort is not None and cohort == state.queues[b].cohort


@dataclass(slots=True, frozen=True)
class HeldQuota:
    """What a backfill reservation's holder needs of its quota: its queue, its request, and its
    planned start (the quota is the holder's then, not now)."""

    queue: Queue
    request: Vec
    start: float


def ending_by(state: ClusterState, queue: str, start: float) -> list[Job]:
    """The running jobs drawing on ``queue``'s quota (its own, or its cohort's) that end by
    ``start`` by their estimates (a job past its estimate counts as ending now), in order of end.
    Remembered until a job starts or stops: a cycle asks again for every kind of job it checks
    beside a reservation's holder."""
    memo = memo_of(state)
    cohort = state.queues[queue].cohort
    group = (cohort, None) if cohort is not None else (None, queue)
    key = (state.epoch, len(state.ends), group, start)
    if memo.ending is not None and memo.ending[0] == key:
        return memo.ending[1]
    ending: list[Job] = []
    for end, _, jid in state.ends:
        if end > start:
            break
        job = state.jobs[jid]
        if shares_quota(state, job.queue, queue):
            ending.append(job)
    memo.ending = (key, ending)
    return ending


def fits_at_start(state: ClusterState, queue: Queue, request: Vec, borrowing: bool, held: HeldQuota) -> bool:
    """Whether ``request``, started now and still running at ``held.start``, fits ``queue``'s
    quota then beside the holder's request: the usage counted is what is left at the holder's
    start, once the running jobs on the same quota that end by then (by their estimates, upper
    bounds) have given theirs back. Reading usage now instead would hold back jobs whose quota the
    holder never needs (a job that waits to borrow would keep every lender's spare quota)."""
    ending = ending_by(state, held.queue.name, held.start)
    queues = state.queues
    for job in ending:
        usage, charged = queues[job.queue].usage, job.charged  # a victim lifted for a search: ZERO
        for r in range(3):
            usage[r] -= charged[r]
    usage = held.queue.usage
    for r in range(3):
        usage[r] += held.request[r]
    try:
        return check(state, queue, request, borrowing).reason is None
    finally:
        for r in range(3):
            usage[r] -= held.request[r]
        for job in ending:
            usage, charged = queues[job.queue].usage, job.charged
            for r in range(3):
                usage[r] += charged[r]


def is_borrowing(queue: Queue) -> bool:
    """True when the queue uses more than its nominal quota of some resource."""
    return any(queue.usage[r] > queue.nominal[r] for r in range(3))


def needs_borrowing(queue: Queue, request: Vec) -> bool:
    """True when admitting ``request`` would take the queue above its nominal quota."""
    return any(request[r] and queue.usage[r] + request[r] > queue.nominal[r] for r in range(3))


def share_basis(state: ClusterState, queue: Queue) -> tuple[float, float, float]:
    """The capacity a queue's share is measured against: its cohort's nominal, or the cluster."""
    bases = memo_of(state).quotas(state).share_basis
    cached = bases.get(queue.name)
    if cached is not None:
        return cached
    cluster = (
        float(sum(n.gpu_count for n in state.nodes) * 1000),
        float(sum(n.cpu for n in state.nodes)),
        float(sum(n.memory for n in state.nodes)),
    )
    basis = list(cluster)
    if queue.cohort is not None:
        for r in range(3):
            total = 0.0
            for name in state.cohorts[queue.cohort]:
                nominal = state.queues[name].nominal[r]
                if nominal != INF:
                    total += nominal
            if total > 0:
                basis[r] = total
    out = (basis[0], basis[1], basis[2])
    bases[queue.name] = out
    return out


def dominant_share(state: ClusterState, queue: Queue, extra: Vec = (0, 0, 0)) -> float:
    """Dominant resource share over weight, with ``extra`` added to the queue's usage (and, for
    a queue with a usage half-life, the GPUs it held lately: ``Queue.past_gpu``)."""
    basis = share_basis(state, queue)
    best = 0.0
    for r in range(3):
        b = basis[r]
        if b <= 0 or b >= 1 << 60:
            continue
        s = (queue.usage[r] + extra[r] + (queue.past_gpu if r == 0 else 0.0)) / b
        if s > best:
            best = s
    return best / queue.weight
