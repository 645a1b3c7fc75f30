"""Why a job waits: reason codes turned into one sentence with the numbers, positions and ETAs.

The cycle records a reason code on every job it could not start; this module, run when someone
asks (the report, the console), re-derives the numbers from the current state: what the job asks
for, what is free, what is in its way, and when the backfill planner expects it to start.
"""

from __future__ import annotations

from dataclasses import dataclass

from .enums import JobState, PendingReason
from .policy import quota
from .policy.backfill import estimate_starts
from .policy.ordering import AdmissionOrder, queue_positions
from .policy.placement import (
    diagnose,
    gang_counts,
    model_allowed,
    no_matching_nodes,
    request_of,
)
from .scenario.quantity import format_cpu, format_duration, format_memory
from .state import INF, MILLI, ClusterState, Job, PodGroup


@dataclass(slots=True, frozen=True)
class Explanation:
    reason: PendingReason | None
    message: str | None
    queue_position: int | None
    estimated_start: float | None


def gpus(milli: float) -> str:
    """Milli-GPUs as a person writes GPUs: 16, 0.5."""
    if milli == INF:
        return "unlimited"
    return f"{milli / MILLI:g}"


def amount(resource: str, value: float) -> str:
    if value == INF:
        return "unlimited"
    if resource == "gpu":
        return f"{gpus(value)} GPUs"
    if resource == "cpu":
        return f"{format_cpu(int(value))} CPU"
    return f"{format_memory(int(value))} memory"


def _pod_words(pod: PodGroup, n: int) -> str:
    if pod.whole_gpus:
        each = f"{pod.whole_gpus} GPU" + ("s" if pod.whole_gpus > 1 else "")
    elif pod.share:
        each = f"{pod.share / MILLI:g} of a GPU"
    else:
        each = "no GPU"
    models = f" ({'/'.join(sorted(pod.models))})" if pod.models else ""
    return f"{n} pod{'s' if n != 1 else ''} x {each}{models}"


def _asks(job: Job) -> str:
    parts = [_pod_words(g, g.count) for g in job.groups]
    total = job.request[0]
    text = " + ".join(parts)
    if len(job.groups) > 1 or job.groups[0].count > 1:
        text += f" = {gpus(total)} GPUs"
    return text


def _capacity_numbers(state: ClusterState) -> tuple[int, int]:
    free = state.total_whole_free
    best = max((n.whole_free for n in state.nodes if n.schedulable), default=0)
    return free, best


def _constrained(job: Job) -> PodGroup | None:
    """The pod group (most GPUs first) whose node constraints exclude nodes, if any."""
    return next((g for g in sorted(job.groups, key=lambda g: -g.gpu_milli) if g.eligible is not None), None)


def _constraint_words(state: ClusterState, pod: PodGroup) -> str:
    """What a pod's node constraints leave of the cluster: ``allow 4 of 10 nodes (why), with 8
    GPUs free, at most 8 on one``."""
    assert pod.eligible is not None
    nodes = [state.nodes[i] for i in sorted(pod.eligible)]
    usable = [n for n in nodes if n.schedulable and model_allowed(pod, n)]
    free = sum(n.whole_free for n in usable)
    best = max((n.whole_free for n in usable), default=0)
    why = f" ({pod.exclusions})" if pod.exclusions else ""
    return (
        f"its node constraints allow {len(nodes)} of {len(state.nodes)} nodes{why}, "
        f"with {free} GPUs free on them, at most {best} on one"
    )


def message(state: ClusterState, job: Job, reason: PendingReason, now: float, borrowing: bool = True) -> str:
    q = state.queues[job.queue]
    if reason == PendingReason.HELD:
        return "An operator put this job on hold; it will not be admitted until it is released."
    if reason == PendingReason.AWAITING_APPROVAL:
        return f"Queue {q.name} admits jobs only after an operator approves them, and this one is not approved yet."
    counts = gang_counts(job, job.min_count < job.total_pods)
    request = request_of(job, counts)
    if reason in (PendingReason.WAITING_FOR_QUOTA, PendingReason.EXCEEDS_QUOTA):
        v = quota.check(state, q, request, borrowing)
        if v.fits:
            v = quota.check(state, q, job.request, borrowing)
        res = v.resource or "gpu"
        r = ("gpu", "cpu", "memory").index(res)
        if reason == PendingReason.EXCEEDS_QUOTA:
            ceiling = v.ceiling if not v.fits else (quota.ceiling(state, q, r) if borrowing else q.nominal[r])
            what = "plus what it may borrow" if borrowing else "and no borrowing under this policy"
            return (
                f"Asks for {amount(res, request[r])} but queue {q.name} can never hold more than "
                f"{amount(res, ceiling)} (nominal {amount(res, q.nominal[r])} {what}); "
                "it cannot start unless the quota grows."
            )
        cohort = f" and cohort {q.cohort} has nothing left to lend" if q.cohort and borrowing else ""
        return (
            f"Asks for {amount(res, request[r])} but queue {q.name} uses {amount(res, q.usage[r])} of "
            f"{amount(res, q.nominal[r])} nominal, so only {amount(res, v.available)} is available to it now{cohort}."
        )
    free, best = _capacity_numbers(state)
    if reason == PendingReason.NO_MATCHING_NODES:
        pod = no_matching_nodes(state, job) or job.groups[0]
        found = diagnose(state, pod)
        why = ", ".join(f"{n} {k}" for k, n in sorted(found.items(), key=lambda kv: -kv[1]) if k != "fits")
        if pod.exclusions and found.get("excluded by its node constraints"):
            why += f" ({pod.exclusions})"
        return f"No schedulable node can ever hold its {_pod_words(pod, 1)}: of {len(state.nodes)} nodes, {why}."
    if reason == PendingReason.TOPOLOGY_UNSATISFIABLE:
        parts = []
        for g, n in zip(job.groups, counts):
            if g.topology_level is None:
                continue
            level = state.levels[g.topology_level]
            domains = state.domains[g.topology_level]
            if g.eligible is None:
                roomiest = max((d.whole_free for d in domains), default=0)
                where = ""
            else:
                roomiest = max(
                    (
                        sum(state.nodes[i].whole_free for i in d.node_ids if i in g.eligible and state.nodes[i].schedulable)
                        for d in domains
                    ),
                    default=0,
                )
                where = f" on nodes its node constraints allow ({len(g.eligible)} of {len(state.nodes)})"
            parts.append(
                f"needs {_pod_words(g, n)} inside one {level}, but the roomiest {level} has {roomiest} GPUs free{where}"
            )
        text = "; ".join(parts)
        return f"{text[:1].upper()}{text[1:]} ({free} free in the whole cluster)."
    if reason == PendingReason.RESERVED_FOR_HIGHER_PRIORITY and state.reservation is not None:
        holder = state.jobs[state.reservation[0]]
        start = state.reservation[1]
        runtime = job.estimated_runtime()
        run = "runs until the end" if runtime == INF else f"needs {format_duration(runtime)}"
        return (
            f"Would fit now, but the capacity is reserved for {holder.name}, planned to start at "
            f"{format_duration(start)}; this job {run} and would delay it."
        )
    pod = max(job.groups, key=lambda g: g.gpu_milli)
    cpu_note = ""
    if pod.cpu or pod.memory:
        cpu_note = f", {format_cpu(pod.cpu)} CPU and {format_memory(pod.memory)} per pod"
    constrained = _constrained(job)
    if constrained is not None:
        return (
            f"Asks for {_asks(job)}{cpu_note}; {_constraint_words(state, constrained)} "
            f"({free} GPUs free on all schedulable nodes)."
        )
    return (
        f"Asks for {_asks(job)}{cpu_note}; {free} GPUs are free on schedulable nodes, "
        f"at most {best} on one node."
    )


def explain_all(state: ClusterState, now: float, borrowing: bool = True) -> dict[int, Explanation]:
    """An explanation for every submitted job that is not running or finished.

    ``borrowing`` is the policy's: without it a queue's quota is its nominal quota alone.
    """
    waiting = [
        j
        for j in state.jobs
        if j.submitted and (j.current_run is None or j.incomplete_gang) and j.state != JobState.FINISHED
    ]
    if not waiting:
        return {}
    positions = queue_positions(state)
    # The planner places whole gangs; a gang already holding part of its pods has no estimate.
    order = [
        j
        for j in AdmissionOrder(state)
        if not j.held
        and not j.incomplete_gang
        and j.pending_reason not in (PendingReason.AWAITING_APPROVAL, PendingReason.HELD)
    ]
    etas = estimate_starts(state, order, now)
    out: dict[int, Explanation] = {}
    for job in waiting:
        reason = job.pending_reason or PendingReason.INSUFFICIENT_CAPACITY
        eta = etas.get(job.id)
        if reason in (PendingReason.HELD, PendingReason.AWAITING_APPROVAL, PendingReason.EXCEEDS_QUOTA):
            eta = None
        text = message(state, job, reason, now, borrowing)
        if job.incomplete_gang:
            text = f"{holding(job)} {text}"
        out[job.id] = Explanation(reason, text, positions.get(job.id), eta)
    return out


def holding(job: Job) -> str:
    """What an incomplete gang holds while it waits for the rest of its pods."""
    run = job.current_run
    assert run is not None
    held = sum(p.gpu_milli for p in run.placements)
    return (
        f"Holds {len(run.placements)} of its {job.min_count} pods ({gpus(held)} GPUs) without working, "
        "waiting for the rest (no gang scheduling)."
    )
