"""The quota audit finds admissions that broke a limit, from a report alone, and only those."""

from __future__ import annotations

import textwrap

from conftest import replay

from usher.engine.quota_audit import audit_quotas
from usher.engine.scenario import parse_scenario

SCENARIO = """
name: t
nodeGroups: [{prefix: n, count: 4, template: {gpus: 8, cpu: 64}}]
queues:
  - {name: a, cohort: c, quota: {gpu: 8, cpu: 32}, borrowingLimit: {gpu: 8}}
  - {name: b, cohort: c, quota: {gpu: 16}, lendingLimit: {gpu: 4}}
jobs:
  - {name: a1, queue: a, duration: 1h, pods: [{gpu: 8, cpu: 8}]}
  - {name: a2, queue: a, duration: 1h, pods: [{count: 2, gpu: 4, cpu: 8}]}
  - {name: b1, queue: b, duration: 1h, pods: [{gpu: 8}]}
"""


def _scenario(extra: str = ""):
    return parse_scenario(textwrap.dedent(SCENARIO + extra), file="t.yaml")


def _job(name: str, *runs: tuple[float, float, list[dict]]) -> dict:
    return {"name": name, "runs": [{"start": s, "end": e, "placements": p} for s, e, p in runs]}


def _pods(pod: str, n: int, node: str = "n-01", gpus: int = 8) -> list[dict]:
    return [{"pod": f"{pod}-{k}", "node": node, "gpus": list(range(gpus))} for k in range(n)]


def test_replays_of_every_policy_break_no_quota():
    scenario = _scenario()
    for policy in ("usher", "kueue", "volcano", "slurm", "kube-default", "fifo"):
        assert audit_quotas(scenario, replay(SCENARIO, policy=policy)) == [], policy


def test_a_queue_above_what_it_may_borrow_is_a_violation():
    # a may hold its 8 GPUs plus the 4 that b lends (its borrowing limit of 8 does not bind).
    report = {"jobs": [_job("a1", (0.0, 3600.0, _pods("pod", 1)))]}
    assert audit_quotas(_scenario(), report) == []
    report["jobs"].append(_job("a2", (10.0, 3600.0, _pods("pod", 2, gpus=4))))
    found = audit_quotas(_scenario(), report)
    assert [(v.time, v.job, v.where, v.resource, v.used, v.limit) for v in found] == [
        (10.0, "a2", "queue a", "gpu", 16.0, 12.0)
    ]


def test_cpu_quota_counts_each_pod_from_the_scenario():
    # Three runs of a2 at once: 6 pods x 8 cores = 48 > a's 32 (nobody lends CPU quota).
    report = {"jobs": [_job("a2", (0.0, 60.0, _pods("pod", 2, gpus=4))) for _ in range(3)]}
    found = audit_quotas(_scenario(), report)
    assert [(v.resource, v.used, v.limit) for v in found if v.resource == "cpu"] == [("cpu", 48000.0, 32000.0)]


def test_borrowers_together_may_not_overdraw_the_cohort_pool():
    # The pool is a's 8 (it lends all) and b's 4. b above its guaranteed 12 draws 4 of it, so a
    # starting its 12th GPU (within its own ceiling of 12) overdraws the pool: 16 > 12.
    report = {"jobs": [
        _job("a1", (0.0, 60.0, _pods("pod", 1))),
        _job("b1", (0.0, 60.0, _pods("pod", 1)), (0.0, 60.0, _pods("pod", 1, node="n-02"))),
    ]}
    assert audit_quotas(_scenario(), report) == []
    report["jobs"].append(_job("a2", (10.0, 60.0, _pods("pod", 1, node="n-03", gpus=4))))
    found = audit_quotas(_scenario(), report)
    assert [(v.job, v.where, v.used, v.limit) for v in found] == [("a2", "cohort c", 16.0, 12.0)]


def test_a_pod_bound_later_counts_from_its_since_and_an_ended_run_frees_its_quota():
    late = [{"pod": "pod-0", "node": "n-01", "gpus": [0, 1, 2, 3]},
            {"pod": "pod-1", "node": "n-02", "gpus": [0, 1, 2, 3], "since": 100.0}]
    report = {"jobs": [_job("a1", (0.0, 100.0, _pods("pod", 1))), _job("a2", (0.0, 200.0, late))]}
    # Until 100 a holds 8 + 4 = 12 (its ceiling); a1 ends at 100 as a2's second pod comes.
    assert audit_quotas(_scenario(), report) == []
    report["jobs"][0]["runs"][0]["end"] = 101.0
    assert [(v.time, v.job) for v in audit_quotas(_scenario(), report)] == [(100.0, "a2")]


def test_lowering_a_quota_is_not_a_violation_until_something_starts_above_it():
    scenario = _scenario("events:\n  - {at: 50, action: setQuota, queue: a, quota: {gpu: 4}, borrowingLimit: {gpu: 0}}\n")
    report = {"jobs": [_job("a1", (0.0, 3600.0, _pods("pod", 1)))]}
    assert audit_quotas(scenario, report) == []
    report["jobs"].append(_job("a2", (60.0, 120.0, _pods("pod", 1, gpus=4))))
    assert [(v.time, v.where, v.used, v.limit) for v in audit_quotas(scenario, report)] == [(60.0, "queue a", 12.0, 4.0)]
