"""Quota audit of a replay: did any admission take a queue or a cohort over its limits?

This does not trust the engine's own accounting. It rebuilds every queue's usage over time from
the report alone (each pod's node, GPUs or GPU share, held from its run's start, or from its
``since``, to the run's end) with each pod's CPU and memory from the scenario, and checks it
against the scenario's quotas, applying ``setQuota`` events as they come. The limits, as
``spec/scenario.md`` and Kueue define them, per resource a queue has a quota for:

- a queue holds at most its nominal quota plus its borrowing limit (nominal alone outside a
  cohort, and nominal plus everything the others lend when there is no borrowing limit);
- in a cohort, what members use beyond their guaranteed part (nominal minus lending limit) comes
  out of the pool the members lend, and never exceeds it.

Usage only grows when pods start, so the limits are checked at every start, after everything that
ends at that moment has ended. Lowering a quota never stops running jobs, so only a start that
leaves its own queue over its ceiling, or that draws from an overdrawn pool, is a violation.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from . import fmt
from .enums import Action
from .scenario import Scenario
from .scenario.models import QueueSpec, Resources

RESOURCES = ("gpu", "cpu", "memory")
INF = float("inf")
MILLI = 1000
#: GPU shares are rounded to 1/1000, so sums may carry float noise below this
EPSILON = 1e-6


@dataclass(frozen=True, slots=True)
class QuotaViolation:
    """A job start that left a queue above its ceiling, or a cohort's pool overdrawn."""

    time: float
    job: str
    where: str  # "queue NAME" or "cohort NAME"
    resource: str
    used: float
    limit: float

    def __str__(self) -> str:
        scale = MILLI if self.resource == "gpu" else 1  # GPUs here, milli-GPUs to fmt
        used, limit = fmt.amount(self.resource, self.used * scale), fmt.figure(self.resource, self.limit * scale)
        return f"at {self.time:g}s {self.job} took {self.where} to {used} (limit {limit})"


@dataclass(slots=True)
class _Limits:
    nominal: dict[str, float]
    borrowing: dict[str, float]
    lending: dict[str, float]
    cohort: str | None


def _vec(res: Resources | None, default: float) -> dict[str, float]:
    out = {}
    for r in RESOURCES:
        value = getattr(res, r) if res is not None else None
        out[r] = default if value is None else float(value)
    return out


def _limits(q: QueueSpec) -> _Limits:
    return _Limits(_vec(q.quota, INF), _vec(q.borrowing_limit, INF), _vec(q.lending_limit, INF), q.cohort)


def _merge(current: dict[str, float], res: Resources | None) -> None:
    if res is None:
        return
    for r in RESOURCES:
        value = getattr(res, r)
        if value is not None:
            current[r] = float(value)


def _lent(lim: _Limits, r: str) -> float:
    return min(lim.lending[r], lim.nominal[r])


def audit_quotas(scenario: Scenario, report: dict[str, Any]) -> list[QuotaViolation]:
    """Every job start in ``report`` that broke a quota limit of ``scenario`` (empty: none)."""
    limits = {q.name: _limits(q) for q in scenario.queues}
    pods = {
        job.name: (job.queue, {pod.name: pod for pod in job.pods}) for job in scenario.all_jobs()
    }
    # (time, kind, order, queue, amounts, job): kind 0 = a pod ends, 1 = a quota change, 2 = a start
    events: list[tuple[float, int, int, str, dict[str, float], str, Any]] = []
    order = 0
    for job in report["jobs"]:
        queue, groups = pods[job["name"]]
        for run in job["runs"]:
            for p in run["placements"]:
                spec = groups[p["pod"].rsplit("-", 1)[0]]
                gpu = p["gpuShare"] if "gpuShare" in p else float(len(p["gpus"]))
                amount = {"gpu": gpu, "cpu": float(spec.cpu), "memory": float(spec.memory)}
                start = p.get("since", run["start"])
                order += 1
                events.append((start, 2, order, queue, amount, job["name"], None))
                events.append((run["end"], 0, order, queue, amount, job["name"], None))
    for ev in scenario.events:
        if ev.action == Action.SET_QUOTA and ev.queue in limits:
            order += 1
            events.append((ev.at, 1, order, ev.queue, {}, "", ev))
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    usage: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(RESOURCES, 0.0))
    members: dict[str, list[str]] = defaultdict(list)
    for name, lim in limits.items():
        if lim.cohort is not None:
            members[lim.cohort].append(name)
    violations: list[QuotaViolation] = []
    i = 0
    while i < len(events):
        t = events[i][0]
        started: list[tuple[str, str]] = []
        while i < len(events) and events[i][0] == t:
            _, kind, _, queue, amount, job_name, ev = events[i]
            if kind == 1:
                lim = limits[queue]
                _merge(lim.nominal, ev.quota)
                _merge(lim.borrowing, ev.borrowing_limit)
                _merge(lim.lending, ev.lending_limit)
            else:
                sign = 1.0 if kind == 2 else -1.0
                for r in RESOURCES:
                    usage[queue][r] += sign * amount[r]
                if kind == 2 and (queue, job_name) not in started:
                    started.append((queue, job_name))
            i += 1
        for queue, job_name in started:
            violations.extend(_check(t, job_name, queue, limits, usage, members))
    return violations


def _check(
    t: float,
    job: str,
    queue: str,
    limits: dict[str, _Limits],
    usage: dict[str, dict[str, float]],
    members: dict[str, list[str]],
) -> list[QuotaViolation]:
    lim = limits[queue]
    out: list[QuotaViolation] = []
    for r in RESOURCES:
        nominal = lim.nominal[r]
        if nominal == INF:
            continue
        used = usage[queue][r]
        if lim.cohort is None:
            ceiling = nominal
        else:
            others = sum(_lent(limits[m], r) for m in members[lim.cohort] if m != queue and limits[m].nominal[r] != INF)
            ceiling = min(nominal + lim.borrowing[r], nominal + others)
        if used > ceiling + EPSILON:
            out.append(QuotaViolation(t, job, f"queue {queue}", r, used, ceiling))
            continue
        if lim.cohort is None or used <= nominal - _lent(lim, r) + EPSILON:
            continue
        pool = 0.0
        drawn = 0.0
        for m in members[lim.cohort]:
            ml = limits[m]
            if ml.nominal[r] == INF:
                continue
            pool += _lent(ml, r)
            drawn += max(0.0, usage[m][r] - (ml.nominal[r] - _lent(ml, r)))
        if drawn > pool + EPSILON:
            out.append(QuotaViolation(t, job, f"cohort {lim.cohort}", r, drawn, pool))
    return out
