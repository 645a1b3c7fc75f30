"""Jobs alike: the ``Plan`` a job is tried by, and its *kind*, shared by every job alike.

A job's plan is its admission attempts (the full gang, then the smallest ``minCount`` allows),
each with the memo keys the cycle remembers verdicts under; jobs of one queue, priority and gang
share one plan and one kind (``cycle``: a kind whose attempts all failed is *settled*). Plans
and the interned keys live in the cycle's memo (``memo.CycleMemo``), computed once per job.
"""

from __future__ import annotations

from .memo import memo_of
from .plans import Attempt, Plan
from .policy.placement import gang_counts, request_of
from .state import ClusterState, Job


def _intern(ids: dict[tuple, int], key: tuple) -> int:
    found = ids.get(key)
    if found is None:
        found = ids[key] = len(ids)
    return found


def plan_of(state: ClusterState, job: Job) -> Plan:
    """The attempts for ``job``, computed once per job (while its groups stay the same) and
    shared by every job of the same queue, priority and gang."""
    memo = memo_of(state)
    cached = memo.plans.get(job.id)
    if cached is not None and cached.groups is job.groups and cached.min_count == job.min_count:
        return cached
    signature = (job.queue, job.priority, job.min_count, job.groups)
    shared = memo.plans_by_signature.get(signature)
    if shared is None:
        out = []
        shapes = [gang_counts(job, False)]
        if job.min_count < job.total_pods:
            shapes.append(gang_counts(job, True))
        ids = memo.ids
        for counts in shapes:
            request = request_of(job, counts)
            out.append(
                Attempt(
                    tuple(counts),
                    request,
                    _intern(ids, ("quota", job.queue, request)),
                    _intern(ids, ("preempt", job.queue, job.priority, request, job.groups)),
                    _intern(ids, ("shape", job.groups, tuple(counts))),
                )
            )
        attempts = tuple(out)
        shared = Plan(job.groups, job.min_count, attempts, _intern(ids, ("kind", job.queue, job.priority, attempts)))
        memo.plans_by_signature[signature] = shared
    plan = shared if shared.groups is job.groups else Plan(job.groups, job.min_count, shared.attempts, shared.kind)
    memo.plans[job.id] = plan
    return plan
