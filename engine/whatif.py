"""What an operator action would do, asked before doing it: the console's confirmation dialogs.

Each question changes the state in place for a moment and puts everything back before it returns
(the same release-and-restore discipline the backfill planner uses), so nothing is copied:

- ``preempt_impact``: the gang's pods and where they run, the work lost since the last
  checkpoint, and which waiting jobs would likely start in the freed room;
- ``drain_impact``: the gangs a drain would requeue;
- ``quota_preview``: which pending jobs a new quota makes admissible (or no longer admissible)
  as far as quota goes, and whether the cluster has room for them now.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .enums import JobState, PendingReason
from .policy import quota
from .policy.backfill import estimate_starts
from .policy.ordering import AdmissionOrder
from .policy.placement import gang_counts, request_of
from .state import INF, RESOURCE_NAMES, ClusterState, Job, QuotaVec

#: how many pending jobs the "who starts instead" plan looks at
LOOKAHEAD = 200


@dataclass(slots=True, frozen=True)
class PodSpot:
    pod: str
    node: str
    gpus: tuple[int, ...]
    share: float
    """Fraction of each listed GPU the pod holds; 0 for whole GPUs."""


@dataclass(slots=True, frozen=True)
class PreemptImpact:
    job: str
    pods: tuple[PodSpot, ...]
    work_lost: float
    """Seconds of run time since the last checkpoint (all of it without checkpoints)."""
    checkpoint_every: float | None
    likely_starters: tuple[str, ...]
    """Waiting jobs that would start at once in the room the preemption frees."""


@dataclass(slots=True, frozen=True)
class QuotaPreview:
    queue: str
    admissible: tuple[str, ...]
    """Pending jobs that do not fit the queue's quota now and would with the new limits."""
    room_now: tuple[str, ...]
    """Of those, the ones the cluster also has room for at once."""
    blocked: tuple[str, ...]
    """Pending jobs that fit now and would not with the new limits."""
    over_quota: float
    """GPUs the queue's running jobs would hold above its new ceiling (0 when within)."""


def _waiting_order(state: ClusterState) -> list[Job]:
    order = []
    for job in AdmissionOrder(state):
        if job.held or job.pending_reason in (PendingReason.AWAITING_APPROVAL, PendingReason.HELD):
            continue
        order.append(job)
        if len(order) >= LOOKAHEAD:
            break
    return order


def preempt_impact(state: ClusterState, job: Job, now: float) -> PreemptImpact:
    """What preempting ``job`` now would cost and who would likely take its place."""
    run = job.current_run
    spots = tuple(
        PodSpot(p.pod, state.nodes[p.node_id].name, tuple(p.gpus), p.share / 1000 if p.share else 0.0)
        for p in (run.placements if run else [])
    )
    starters: tuple[str, ...] = ()
    if run is not None:
        usage = state.queues[job.queue].usage
        charged = job.charged
        state.unplace(job, run.placements)
        for r in range(3):
            usage[r] -= charged[r]
        try:
            order = [j for j in _waiting_order(state) if j.id != job.id]
            starts = estimate_starts(state, order, now)
            starters = tuple(state.jobs[jid].name for jid, t in starts.items() if t <= now)
        finally:
            for r in range(3):
                usage[r] += charged[r]
            state.place(job, run.placements)
    return PreemptImpact(job.name, spots, job.work_at_risk(now), job.checkpoint_every, starters)


def drain_impact(state: ClusterState, node_name: str) -> list[str]:
    """The running jobs with a pod on ``node_name``: a drain stops and requeues each whole gang."""
    node = state.node(node_name)
    return sorted(state.jobs[j].name for j in node.jobs if state.jobs[j].current_run is not None)


def quota_preview(
    state: ClusterState,
    queue_name: str,
    nominal: QuotaVec | None = None,
    borrowing_limit: QuotaVec | None = None,
    lending_limit: QuotaVec | None = None,
    now: float = 0.0,
) -> QuotaPreview:
    """The effect of new limits on ``queue_name`` (``None``: unchanged), without applying them.

    Quota is shared in a cohort, so every pending job of every queue in the cohort is checked.
    """
    q = state.queues[queue_name]
    peers = [state.queues[n] for n in state.cohorts.get(q.cohort, [])] if q.cohort else [q]

    def verdicts() -> dict[int, bool]:
        out: dict[int, bool] = {}
        for peer in peers:
            for *_, jid in peer.pending:
                job = state.jobs[jid]
                counts = gang_counts(job, job.min_count < job.total_pods)
                out[jid] = quota.check(state, peer, request_of(job, counts)).fits
        return out

    before = verdicts()
    saved = (q.nominal, q.borrowing_limit, q.lending_limit)
    try:
        q.nominal = nominal if nominal is not None else q.nominal
        q.borrowing_limit = borrowing_limit if borrowing_limit is not None else q.borrowing_limit
        q.lending_limit = lending_limit if lending_limit is not None else q.lending_limit
        state.quotas_changed()
        after = verdicts()
        ceiling = quota.ceiling(state, q, 0)
        over = max(0.0, (q.usage[0] - ceiling) / 1000) if ceiling != INF else 0.0
        gained = [jid for jid, ok in after.items() if ok and not before.get(jid, False)]
        starts = estimate_starts(state, [state.jobs[j] for j in gained if _startable(state.jobs[j])], now) if gained else {}
    finally:
        q.nominal, q.borrowing_limit, q.lending_limit = saved
        state.quotas_changed()
    name = lambda jid: state.jobs[jid].name  # noqa: E731
    return QuotaPreview(
        queue_name,
        tuple(name(j) for j in gained),
        tuple(name(j) for j in gained if starts.get(j, INF) <= now),
        tuple(name(j) for j, ok in before.items() if ok and not after.get(j, False)),
        over,
    )


def _startable(job: Job) -> bool:
    return job.state == JobState.PENDING and not job.held and job.pending_reason not in (
        PendingReason.AWAITING_APPROVAL,
        PendingReason.HELD,
    )


def parse_limit(resource: str, text: str) -> float:
    """A limit typed by an operator: a number of the resource's unit, or blank for unlimited."""
    from .scenario.quantity import parse_cpu, parse_memory

    text = text.strip()
    if not text or text.lower() in ("none", "unlimited", "-"):
        return INF
    if resource == "gpu":
        expected = "not a number of GPUs (type one such as 64 or 0.5; blank means unlimited)"
        try:
            value = float(text)
        except ValueError:
            raise ValueError(expected) from None
        if not math.isfinite(value):
            raise ValueError(expected)
        if value < 0:
            raise ValueError("a number of GPUs must not be negative (blank means unlimited)")
        return round(value * 1000)
    if resource == "cpu":
        return parse_cpu(text)
    if resource == "memory":
        return parse_memory(text)
    raise ValueError(f"unknown resource {resource!r}; known: {', '.join(RESOURCE_NAMES)}")
