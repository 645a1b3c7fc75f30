"""The replay report of ``spec/scenario.md`` section 3, built from a finished controller.

Beyond the spec's summary: ``gangsDeadlocked`` counts the jobs holding some of their pods that
could never get the rest (``policy.podwise.deadlocked_gangs``), and ``gpuHeldIdle`` is the part
of ``gpuUtilization`` held by gangs waiting for the rest of their pods (both only happen without
gang admission). ``moves`` counts the runs that consolidation ended to move a job (each is also
one of ``preemptions``: its run ends ``Preempted``, by the gang it made room for, and the next
starts at once). Such a wait ends at a run's ``workStart``; pods bound after their run began
carry ``since``. Waits are measured to the first time a job began to work.

Field names and order follow the spec. Numbers are rounded (times to the millisecond, ratios to
six places) so that the same scenario and seed always give byte-identical JSON.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from .controller import Controller
from .enums import AuditAction, EndReason, JobState
from .explain import explain_all
from .policy.podwise import deadlocked_gangs
from .state import MILLI, Job

VERSION = "0.1.0"


def _t(x: float | None) -> float | None:
    return None if x is None else round(float(x), 3)


def _run(ctrl: Controller, job: Job, run) -> dict[str, Any]:
    nodes = ctrl.engine.state.nodes
    out: dict[str, Any] = {
        "start": _t(run.start),
        "end": _t(run.end if run.end is not None else ctrl.now),
        "endReason": str(run.end_reason or EndReason.RUNNING),
    }
    if run.by:
        out["by"] = run.by
    if run.work_start != run.start:  # pod-by-pod admission: held pods before the job could work
        out["workStart"] = _t(run.work_start)
    placements = []
    for p in run.placements:
        item: dict[str, Any] = {"pod": p.pod, "node": nodes[p.node_id].name, "gpus": list(p.gpus)}
        if p.share:
            item["gpuShare"] = p.share / MILLI
        if p.bound_at is not None:
            item["since"] = _t(p.bound_at)
        placements.append(item)
    out["placements"] = placements
    return out


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile (0 for an empty list)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    k = max(0, math.ceil(pct / 100 * len(ordered)) - 1)
    return ordered[k]


def build_report(ctrl: Controller) -> dict[str, Any]:
    state = ctrl.engine.state
    now = ctrl.now
    explanations = explain_all(state, now, ctrl.engine.policy.borrowing)
    jobs_out = []
    waits: list[float] = []
    jcts: list[float] = []
    preemptions = 0
    finished = pending = 0
    last_finish = 0.0
    first_submit = min((j.submit for j in state.jobs if j.submitted), default=0.0)
    for job in state.jobs:
        if not job.submitted:
            continue
        runs = [_run(ctrl, job, r) for r in job.runs]
        preemptions += sum(1 for r in job.runs if r.end_reason in (EndReason.PREEMPTED, EndReason.OPERATOR_PREEMPTED))
        if job.current_run is not None and not job.incomplete_gang:
            state_name = JobState.RUNNING
        elif job.state == JobState.FINISHED:
            state_name = JobState.FINISHED
        elif job.held:
            state_name = JobState.HELD
        elif job.state == JobState.AWAITING_APPROVAL:
            state_name = JobState.AWAITING_APPROVAL
        else:
            state_name = JobState.PENDING
        if state_name == JobState.FINISHED:
            finished += 1
            first_work = job.first_work_start
            assert first_work is not None
            waits.append(first_work - job.submit)
            end = job.runs[-1].end or now
            jcts.append(end - job.submit)
            last_finish = max(last_finish, end)
        elif state_name != JobState.RUNNING:
            pending += 1
        ex = explanations.get(job.id)
        jobs_out.append(
            {
                "name": job.name,
                "queue": job.queue,
                "submitted": _t(job.submit),
                "state": str(state_name),
                "runs": runs,
                "pendingReason": str(ex.reason) if ex and ex.reason else None,
                "message": ex.message if ex else None,
                "queuePosition": ex.queue_position if ex else None,
                "estimatedStart": _t(ex.estimated_start) if ex else None,
            }
        )
    m = ctrl.metrics
    util = m.allocated_milli_seconds / MILLI / m.available_gpu_seconds if m.available_gpu_seconds else 0.0
    idle = m.idle_held_milli_seconds / MILLI / m.available_gpu_seconds if m.available_gpu_seconds else 0.0
    summary = {
        "gpuUtilization": round(util, 6),
        "avgWaitSeconds": _t(sum(waits) / len(waits)) if waits else 0.0,
        "p95WaitSeconds": _t(percentile(waits, 95)),
        "avgJctSeconds": _t(sum(jcts) / len(jcts)) if jcts else 0.0,
        "makespanSeconds": _t(last_finish - first_submit) if finished else 0.0,
        "preemptions": preemptions,
        "finished": finished,
        "pending": pending,
        "gangsDeadlocked": len(deadlocked_gangs(state, ctrl.engine.policy)),
        "gpuHeldIdle": round(idle, 6),
        "moves": sum(1 for e in state.audit if e.action == AuditAction.MOVE),
    }
    if ctrl.eta_accuracy is not None:
        summary["etaAccuracy"] = ctrl.eta_accuracy.summary()
    return {
        "scenario": state.name,
        "policy": ctrl.engine.policy.name,
        "seed": ctrl.seed,
        "version": VERSION,
        "endTime": _t(now),
        "jobs": jobs_out,
        "summary": summary,
    }


_NUMBER_LIST = re.compile(r"\[\s+([-0-9.,\s]+?)\s+\]")


def dumps(report: dict[str, Any]) -> str:
    """Indented JSON with lists of numbers (GPU indices) kept on one line."""
    text = json.dumps(report, indent=2)
    text = _NUMBER_LIST.sub(lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)
    return text + "\n"
