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
from dataclasses import replace

from .podrules.model import AffinityTerm, LabelSelector, PodRules, SpreadConstraint
from .podrules.replay import JOB_LABEL, ReplayPods, ReplayRules, job_labels
from .scenario import Scenario
from .scenario.models import JobSpec, QueueSpec, Resources
from .scenario.schema_base import LabelSelector as SelectorSpec
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
    _pod_rules(state, scenario)
    return state


def _selector(spec: SelectorSpec | None, own: str) -> LabelSelector:
    """A scenario selector as the rules' own; none: the pods of the job ``own``."""
    if spec is None:
        return LabelSelector(((JOB_LABEL, own),))
    return LabelSelector(tuple(sorted(spec.match_labels.items())),
                         tuple((t.key, t.operator, frozenset(t.values)) for t in spec.match_expressions))


def pod_rules_of(spec: JobSpec) -> PodRules:
    """A scenario job's ``antiAffinity`` and ``spread`` as the engine's pod rules."""
    return PodRules(
        anti_affinity=tuple(AffinityTerm(_selector(a.label_selector, spec.name), a.topology_key) for a in spec.anti_affinity),
        spread=tuple(SpreadConstraint(c.max_skew, c.topology_key, c.when_unsatisfiable, _selector(c.label_selector, spec.name),
                                      c.min_domains) for c in spec.spread),
    )


def _pod_rules(state: ClusterState, scenario: Scenario) -> None:
    """Give the pod groups of the jobs with rules (and of those another job's anti-affinity
    picks, which must keep away too) their ``ReplayRules``; nothing when no job has rules."""
    specs = scenario.all_jobs()
    if not any(s.anti_affinity or s.spread for s in specs):
        return
    pods = ReplayPods(state)
    ruled: dict[int, PodRules] = {}
    for i, spec in enumerate(specs):
        rules = pod_rules_of(spec)
        if rules or spec.labels:
            pods.jobs[i] = (job_labels(spec.name, spec.labels), rules)
        if rules:
            ruled[i] = rules
    terms = [t for r in ruled.values() for t in r.anti_affinity]
    for i, spec in enumerate(specs):
        labels = job_labels(spec.name, spec.labels)
        if i not in ruled and not any(t.matches("default", "default", labels, {}) for t in terms):
            continue
        rules = ruled.get(i, PodRules())
        job = state.jobs[i]
        gang = tuple((g.name, rules) for g in job.groups)
        job.groups = tuple(replace(g, rules=ReplayRules(tuple(sorted(labels.items())), rules, gang, pods)) for g in job.groups)
