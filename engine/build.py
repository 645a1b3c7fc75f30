"""Turns a validated scenario (pydantic, at the boundary) into the engine's plain state.

Units change here once: GPUs to milli-GPUs, absent CPU/memory on a node to ``UNLIMITED``,
absent quota to ``inf``, priority class names to numbers, topology level names to indexes.
"""

from __future__ import annotations

from .enums import (
    Approval,
    BorrowWithinCohort,
    ReclaimWithinCohort,
    TopologyMode,
    WithinQueue,
)
from .scenario import Scenario
from .scenario.models import JobSpec, QueueSpec, Resources
from .state import INF, MILLI, UNLIMITED, ClusterState, Job, Node, PodGroup, Queue, QuotaVec, Vec


def quota_vec(res: Resources | None, default: float = INF) -> QuotaVec:
    """A scenario ``Resources`` as a state vector (milli-GPUs, millicores, bytes)."""
    if res is None:
        return (default, default, default)
    return (
        default if res.gpu is None else round(res.gpu * MILLI),
        default if res.cpu is None else float(res.cpu),
        default if res.memory is None else float(res.memory),
    )


def resources_dict(res: Resources | None) -> dict[str, float] | None:
    """The resources a ``setQuota`` names, in state units, absent ones left out."""
    if res is None:
        return None
    out: dict[str, float] = {}
    if res.gpu is not None:
        out["gpu"] = round(res.gpu * MILLI)
    if res.cpu is not None:
        out["cpu"] = float(res.cpu)
    if res.memory is not None:
        out["memory"] = float(res.memory)
    return out


def build_job(
    scenario: Scenario, spec: JobSpec, job_id: int, levels: list[str], alike: dict[tuple[PodGroup, ...], tuple[PodGroup, ...]] | None = None
) -> Job:
    """The engine's job for ``spec``; with ``alike``, jobs with equal pod groups share one tuple
    of them (less memory, and the cycle's per-gang plans are found by identity)."""
    groups = []
    for i, pod in enumerate(spec.pods):
        mode = level = None
        if pod.topology is not None:
            if pod.topology.required:
                mode, level = TopologyMode.REQUIRED, levels.index(pod.topology.required)
            elif pod.topology.preferred:
                mode, level = TopologyMode.PREFERRED, levels.index(pod.topology.preferred)
        groups.append(
            PodGroup(
                name=pod.name or ("pod" if len(spec.pods) == 1 else f"pod{i}"),
                count=pod.count,
                gpu_milli=round(pod.gpu * MILLI),
                cpu=pod.cpu,
                memory=pod.memory,
                models=frozenset(pod.gpu_model) if pod.gpu_model else None,
                topology_mode=mode,
                topology_level=level,
            )
        )
    total = sum(g.count for g in groups)
    job = Job(
        id=job_id,
        name=spec.name,
        queue=spec.queue,
        submit=spec.submit,
        priority=scenario.priority_of(spec),
        duration=spec.duration,
        estimate=spec.estimate if spec.estimate is not None else spec.duration,
        preemptible=spec.preemptible,
        checkpoint_every=spec.checkpoint_every,
        min_count=spec.min_count or total,
        groups=_shared(tuple(groups), alike),
        seq=job_id,
    )
    job.request = group_request(groups)
    return job


def _shared(groups: tuple[PodGroup, ...], alike: dict[tuple[PodGroup, ...], tuple[PodGroup, ...]] | None) -> tuple[PodGroup, ...]:
    if alike is None:
        return groups
    return alike.setdefault(groups, groups)


def group_request(groups: list[PodGroup] | tuple[PodGroup, ...]) -> Vec:
    """The whole gang's request: every pod of every group."""
    return (
        sum(g.gpu_milli * g.count for g in groups),
        sum(g.cpu * g.count for g in groups),
        sum(g.memory * g.count for g in groups),
    )


def queue_from_spec(qs: QueueSpec) -> Queue:
    return Queue(
        name=qs.name,
        cohort=qs.cohort,
        nominal=quota_vec(qs.quota),
        borrowing_limit=quota_vec(qs.borrowing_limit),
        lending_limit=quota_vec(qs.lending_limit),
        weight=qs.weight,
        approval=Approval(qs.approval),
        within_queue=WithinQueue(qs.preemption.within_queue),
        reclaim_within_cohort=ReclaimWithinCohort(qs.preemption.reclaim_within_cohort),
        borrow_within_cohort=BorrowWithinCohort(qs.preemption.borrow_within_cohort),
        half_life=qs.usage_half_life,
    )


def build_state(scenario: Scenario) -> ClusterState:
    levels = list(scenario.topology.levels)
    state = ClusterState(scenario.name, levels, dict(scenario.priority_classes))
    for i, spec in enumerate(scenario.all_nodes()):
        islands = [list(isl) for isl in spec.nvlink] if spec.nvlink else [list(range(spec.gpus))]
        state.add_node(
            Node(
                id=i,
                name=spec.name,
                labels=dict(spec.labels),
                gpu_model=spec.gpu_model or "",
                gpu_memory=spec.gpu_memory or 0,
                gpu_count=spec.gpus,
                islands=islands if spec.gpus else [],
                cpu=UNLIMITED if spec.cpu is None else spec.cpu,
                memory=UNLIMITED if spec.memory is None else spec.memory,
            )
        )
    state.finish_building()
    for qs in scenario.queues:
        state.queues[qs.name] = queue_from_spec(qs)
        if qs.cohort is not None:
            state.cohorts.setdefault(qs.cohort, []).append(qs.name)
    alike: dict[tuple[PodGroup, ...], tuple[PodGroup, ...]] = {}
    for i, spec in enumerate(scenario.all_jobs()):
        job = build_job(scenario, spec, i, levels, alike)
        state.jobs.append(job)
        state.job_by_name[job.name] = i
    return state
