"""The scheduling cycle without gangs: pods bound one at a time, as the default kube-scheduler does.

Pending jobs are taken in the policy's order (``kube-default``: priority, then submit time). The
cycle goes round: each job in turn gets its next pod placed (``policy.podwise``), then the next
job, and so on until no job can place another pod. The round models what happens on a cluster
when several jobs' controllers create their pods together: the scheduler's queue holds the pods
of all of them, and they are tried interleaved, not one job's pods all first.

Each pod is checked against its queue's quota on its own (a namespace ResourceQuota: with
``borrowing`` off, the nominal quota is the ceiling) and then placed; a job whose pod fails
stops for this cycle with the reason recorded. A bound pod holds its GPUs and its quota; the job
starts to work (and its run time starts to count) when its last needed pod is bound.
"""

from __future__ import annotations

from .admission import Admitter, CycleResult, mark_waiting
from .enums import Approval, PendingReason
from .policy import quota
from .policy.ordering import AdmissionOrder
from .policy.placement import Placer
from .policy.podwise import place_next_pod, pod_amount, pod_slot, why_pod_waits
from .policy.registry import Policy
from .state import ClusterState, Job, PodGroup


def run_pod_cycle(state: ClusterState, now: float, policy: Policy, engine: Admitter) -> CycleResult:
    result = CycleResult()
    active: list[Job] = []
    for job in AdmissionOrder(state, fair_share=policy.fair_share):
        if job.held:
            mark_waiting(job, PendingReason.HELD)
        elif state.queues[job.queue].approval == Approval.MANUAL and not job.approved:
            mark_waiting(job, PendingReason.AWAITING_APPROVAL)
        else:
            active.append(job)
    #: (pod group, affinity domain's first node or -1) -> why such a pod did not fit this cycle;
    #: capacity only shrinks during a cycle, so it will not fit later in it either
    failed_pods: dict[tuple[PodGroup, int], PendingReason] = {}
    failed_quota: dict[tuple[str, PodGroup], PendingReason] = {}
    while active:
        still: list[Job] = []
        for job in active:
            reason = _bind_next_pod(state, job, now, policy, engine, result, failed_pods, failed_quota)
            if reason is not None:
                mark_waiting(job, reason)
            elif job.incomplete_gang:
                still.append(job)
        active = still
    state.reservation = None
    return result


def _bind_next_pod(
    state: ClusterState,
    job: Job,
    now: float,
    policy: Policy,
    engine: Admitter,
    result: CycleResult,
    failed_pods: dict[tuple[PodGroup, int], PendingReason],
    failed_quota: dict[tuple[str, PodGroup], PendingReason],
) -> PendingReason | None:
    """Bind one more pod of ``job``; the reason it waits when it cannot."""
    run = job.current_run
    bound = run.placements if run is not None else []
    pod = job.groups[pod_slot(job, len(bound))[0]]
    amount = pod_amount(pod)
    cached = failed_quota.get((job.queue, pod))
    if cached is not None:
        return cached
    verdict = quota.check(state, state.queues[job.queue], amount, policy.borrowing)
    if verdict.reason is not None:
        failed_quota[(job.queue, pod)] = verdict.reason
        return verdict.reason
    index = len(bound)
    gi, k = pod_slot(job, index)
    anchor = bound[index - k].node_id if pod.topology_mode is not None and k > 0 else -1
    key = (pod, anchor)
    if key in failed_pods:
        return failed_pods[key]
    placer = Placer(state, scoring=policy.scoring)
    placement = place_next_pod(placer, job, list(bound))
    if placement is None:
        reason = why_pod_waits(state, job, list(bound), placer)
        failed_pods[key] = reason
        return reason
    completes = index + 1 >= job.min_count
    engine.bind_pod(job, placement, amount, now, completes, result)
    return None
