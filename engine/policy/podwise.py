"""Pod-by-pod placement (the default kube-scheduler's model) and gang deadlock detection.

Without gang scheduling, each pod of a job is placed on its own, as soon as it fits. The pods of
a job are bound in a fixed order (its pod groups as written, then by index), so the pods bound
so far are always a prefix of that order. A job works once its first ``minCount`` pods (all of
them by default) are bound; until then it *holds* what it has and waits for the rest.

A pod group with ``required`` topology behaves as pod affinity on that level: its first pod goes
wherever it fits, the later ones only into that pod's domain. With ``preferred`` the later ones
try that domain first, then anywhere. That is how people ask kube-scheduler to keep a job's
workers together, and it is what lets gangs deadlock: two half-placed jobs can each hold what
the other needs.

``deadlocked_gangs`` finds the jobs that can never finish: assume every working job ends and
gives its resources back, then repeatedly let any incomplete gang that could now get its missing
pods (and its quota) complete, run and give back everything. Those left over wait for one
another forever. Every check runs on the state and is undone.
"""

from __future__ import annotations

from ..enums import PendingReason, TopologyMode
from ..state import ClusterState, Job, PodGroup, PodPlacement, Vec
from . import quota
from .placement import Placer, no_matching_nodes
from .registry import Policy


def pod_slot(job: Job, index: int) -> tuple[int, int]:
    """The pod group and the pod's number within it of the ``index``-th pod in binding order."""
    for gi, group in enumerate(job.groups):
        if index < group.count:
            return gi, index
        index -= group.count
    raise IndexError(index)


def pod_amount(pod: PodGroup) -> Vec:
    return (pod.gpu_milli, pod.cpu, pod.memory)


def affinity_domain(state: ClusterState, job: Job, bound: list[PodPlacement], index: int) -> list[int] | None:
    """The node ids the ``index``-th pod should go to to join its group's first pod, if any."""
    gi, k = pod_slot(job, index)
    pod = job.groups[gi]
    if pod.topology_mode is None or pod.topology_level is None or k == 0:
        return None
    first = bound[index - k]
    did = state.nodes[first.node_id].domains[pod.topology_level]
    return state.domains[pod.topology_level][did].node_ids


def place_next_pod(placer: Placer, job: Job, bound: list[PodPlacement]) -> PodPlacement | None:
    """Place the next unbound pod of ``job`` (reserved on the placer's state), or None."""
    index = len(bound)
    gi, k = pod_slot(job, index)
    pod = job.groups[gi]
    within = affinity_domain(placer.state, job, bound, index)
    node = placer.choose_node(pod, within)
    if node is None and within is not None and pod.topology_mode == TopologyMode.PREFERRED:
        node = placer.choose_node(pod, None)
    if node is None:
        return None
    return placer.put(job, pod, node, f"{pod.name}-{k}")


def why_pod_waits(state: ClusterState, job: Job, bound: list[PodPlacement], placer: Placer) -> PendingReason:
    """Why the next pod of ``job`` does not fit: no node ever could, its domain is full, or room."""
    index = len(bound)
    pod = job.groups[pod_slot(job, index)[0]]
    if no_matching_nodes(state, job) is not None:
        return PendingReason.NO_MATCHING_NODES
    if affinity_domain(state, job, bound, index) is not None and placer.choose_node(pod, None) is not None:
        return PendingReason.TOPOLOGY_UNSATISFIABLE
    return PendingReason.INSUFFICIENT_CAPACITY


def _holds_gpus(job: Job) -> bool:
    run = job.current_run
    return run is not None and any(p.gpu_milli for p in run.placements)


def _could_complete(state: ClusterState, job: Job, policy: Policy) -> bool:
    """Could ``job`` get its missing pods (and their quota) on the state as it is?"""
    run = job.current_run
    assert run is not None
    bound = list(run.placements)
    q = state.queues[job.queue]
    placer = Placer(state, scoring=policy.scoring)
    charged: list[Vec] = []
    ok = True
    while len(bound) < job.min_count:
        amount = pod_amount(job.groups[pod_slot(job, len(bound))[0]])
        if not quota.check(state, q, amount, policy.borrowing).fits:
            ok = False
            break
        placement = place_next_pod(placer, job, bound)
        if placement is None:
            ok = False
            break
        bound.append(placement)
        charged.append(amount)
        for r in range(3):
            q.usage[r] += amount[r]
    for amount in charged:
        for r in range(3):
            q.usage[r] -= amount[r]
    placer.undo(job)
    return ok


def _lift(state: ClusterState, job: Job) -> Vec:
    run = job.current_run
    assert run is not None
    charged = job.charged
    state.unplace(job, run.placements)
    state.uncharge(job)
    return charged


def _drop(state: ClusterState, job: Job, charged: Vec) -> None:
    run = job.current_run
    assert run is not None
    state.place(job, run.placements)
    state.charge(job, charged)


def deadlocked_gangs(state: ClusterState, policy: Policy) -> list[Job]:
    """Incomplete gangs holding GPUs that no order of completions could ever let start."""
    stuck = [state.jobs[j] for j in sorted(state.incomplete) if _holds_gpus(state.jobs[j])]
    if not stuck:
        return []
    lifted: list[tuple[Job, Vec]] = []
    try:
        for jid in sorted(state.running):
            job = state.jobs[jid]
            lifted.append((job, _lift(state, job)))
        progress = True
        while progress and stuck:
            progress = False
            for job in list(stuck):
                if _could_complete(state, job, policy):
                    lifted.append((job, _lift(state, job)))
                    stuck.remove(job)
                    progress = True
    finally:
        for job, charged in reversed(lifted):
            _drop(state, job, charged)
    return stuck
