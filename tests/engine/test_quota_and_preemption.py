"""Quotas, cohorts, borrowing and lending limits, fair share, and Kueue's preemption policies."""

from conftest import job, replay

NODES = """
name: t
nodeGroups:
  - {prefix: n, count: 4, template: {gpus: 8}}
"""


def test_quota_waits_and_exceeds_with_numbers():
    r = replay(NODES + """
queues:
  - {name: a, quota: {gpu: 8}}
jobs:
  - {name: first, queue: a, duration: 1h, pods: [{gpu: 8}]}
  - {name: second, queue: a, submit: 1m, duration: 1h, pods: [{gpu: 8}]}
  - {name: huge, queue: a, submit: 1m, duration: 1h, pods: [{gpu: 8, count: 2}]}
""", until=600)
    second = job(r, "second")
    assert second["pendingReason"] == "WaitingForQuota"
    assert "8 GPUs" in second["message"] and "queue a" in second["message"]
    assert second["estimatedStart"] == 3600.0
    huge = job(r, "huge")
    assert huge["pendingReason"] == "ExceedsQuota"
    assert "16 GPUs" in huge["message"] and "never hold more than 8 GPUs" in huge["message"]
    assert huge["estimatedStart"] is None


def test_borrowing_from_an_idle_cohort_member_up_to_the_borrowing_limit():
    r = replay(NODES + """
queues:
  - {name: a, cohort: c, quota: {gpu: 8}, borrowingLimit: {gpu: 8}}
  - {name: b, cohort: c, quota: {gpu: 16}}
jobs:
  - {name: a1, queue: a, duration: 1h, pods: [{gpu: 8}]}
  - {name: a2, queue: a, duration: 1h, pods: [{gpu: 8}]}
  - {name: a3, queue: a, duration: 1h, pods: [{gpu: 8}]}
""", until=60)
    assert job(r, "a1")["state"] == "Running" and job(r, "a2")["state"] == "Running"
    assert job(r, "a3")["pendingReason"] == "ExceedsQuota" or job(r, "a3")["pendingReason"] == "WaitingForQuota"


def test_lending_limit_keeps_part_of_the_quota_home():
    r = replay(NODES + """
queues:
  - {name: a, cohort: c, quota: {gpu: 8}}
  - {name: b, cohort: c, quota: {gpu: 16}, lendingLimit: {gpu: 8}}
jobs:
  - {name: a1, queue: a, duration: 1h, pods: [{gpu: 8}]}
  - {name: a2, queue: a, duration: 1h, pods: [{gpu: 8}]}
  - {name: a3, queue: a, duration: 1h, pods: [{gpu: 8}]}
""", until=60)
    assert job(r, "a2")["state"] == "Running"
    assert job(r, "a3")["pendingReason"] in ("WaitingForQuota", "ExceedsQuota")


def _reclaim(policy: str) -> dict:
    return replay(NODES + f"""
queues:
  - {{name: a, cohort: c, quota: {{gpu: 16}}}}
  - {{name: b, cohort: c, quota: {{gpu: 16}}, preemption: {{reclaimWithinCohort: {policy}}}}}
jobs:
  - {{name: borrower, queue: a, duration: 2h, checkpointEvery: 10m, pods: [{{count: 4, gpu: 8}}]}}
  - {{name: owner, queue: b, submit: 25m, duration: 1h, pods: [{{count: 2, gpu: 8}}]}}
""")


def test_reclaim_within_cohort_preempts_the_borrowing_gang_whole():
    r = _reclaim("Any")
    borrower = job(r, "borrower")
    first = borrower["runs"][0]
    assert first["endReason"] == "Preempted" and first["by"] == "owner" and first["end"] == 1500.0
    assert job(r, "owner")["runs"][0]["start"] == 1500.0
    # Checkpointed every 10 minutes: 20 of the 25 minutes are kept, so 1h40m is left.
    second = borrower["runs"][1]
    assert second["end"] - second["start"] == 2 * 3600 - 1200
    assert r["summary"]["preemptions"] == 1


def test_reclaim_never_makes_the_owner_wait():
    r = _reclaim("Never")
    assert len(job(r, "borrower")["runs"]) == 1
    assert job(r, "owner")["runs"][0]["start"] == 7200.0


PRIO = """
name: t
priorityClasses: {low: 1, high: 100}
nodes: [{name: n1, gpus: 8}]
"""


def test_within_queue_lower_priority_picks_the_victim_that_loses_least_work():
    r = replay(PRIO + """
queues:
  - {name: q, preemption: {withinQueue: LowerPriority}}
jobs:
  - {name: no-ckpt, queue: q, priority: low, duration: 5h, pods: [{gpu: 4}]}
  - {name: ckpt, queue: q, priority: low, duration: 5h, checkpointEvery: 30m, pods: [{gpu: 4}]}
  - {name: urgent, queue: q, submit: 45m, priority: high, duration: 1h, pods: [{gpu: 4}]}
""")
    # Exactly one victim (minimal), and it is the one that loses 15 minutes, not 45.
    assert job(r, "ckpt")["runs"][0]["endReason"] == "Preempted"
    assert job(r, "ckpt")["runs"][0]["by"] == "urgent"
    assert len(job(r, "no-ckpt")["runs"]) == 1
    assert job(r, "urgent")["runs"][0]["start"] == 2700.0


def test_non_preemptible_jobs_are_never_victims():
    r = replay(PRIO + """
queues:
  - {name: q, preemption: {withinQueue: LowerPriority}}
jobs:
  - {name: precious, queue: q, priority: low, duration: 5h, preemptible: false, pods: [{gpu: 8}]}
  - {name: urgent, queue: q, submit: 1m, priority: high, duration: 1h, pods: [{gpu: 4}]}
""")
    assert len(job(r, "precious")["runs"]) == 1
    assert job(r, "urgent")["runs"][0]["start"] == 5 * 3600.0


def test_not_preemptible_is_granted_only_for_quota_the_queue_owns_never_for_what_it_borrowed():
    """A job may ask not to be preempted, but what it borrowed its lender may always take back:
    a borrower marked ``preemptible: false`` is reclaimed all the same, while its sibling that
    runs within the queue's own quota keeps running."""
    r = replay(NODES + """
queues:
  - {name: a, cohort: c, quota: {gpu: 16}}
  - {name: b, cohort: c, quota: {gpu: 16}, preemption: {reclaimWithinCohort: Any}}
jobs:
  - {name: own, queue: a, duration: 3h, preemptible: false, pods: [{count: 2, gpu: 8}]}
  - {name: borrowed, queue: a, submit: 1m, duration: 3h, preemptible: false, pods: [{count: 2, gpu: 8}]}
  - {name: lender, queue: b, submit: 30m, duration: 1h, pods: [{count: 2, gpu: 8}]}
""")
    assert len(job(r, "own")["runs"]) == 1
    assert job(r, "borrowed")["runs"][0]["endReason"] == "Preempted"
    assert job(r, "borrowed")["runs"][0]["by"] == "lender"
    assert job(r, "lender")["runs"][0]["start"] == 1800.0


def test_within_queue_never_does_not_preempt():
    r = replay(PRIO + """
queues:
  - {name: q}
jobs:
  - {name: low, queue: q, priority: low, duration: 2h, pods: [{gpu: 8}]}
  - {name: urgent, queue: q, submit: 1m, priority: high, duration: 1h, pods: [{gpu: 4}]}
""")
    assert job(r, "urgent")["runs"][0]["start"] == 7200.0


def test_lower_or_newer_equal_priority_preempts_a_newer_job_of_equal_priority():
    r = replay(PRIO + """
queues:
  - {name: q, preemption: {withinQueue: LowerOrNewerEqualPriority}}
jobs:
  - {name: older, queue: q, submit: 0s, duration: 1h, pods: [{gpu: 8}]}
  - {name: newer, queue: q, submit: 1m, duration: 3h, pods: [{gpu: 8}]}
events:
  - {at: 0s, action: hold, job: older}
  - {at: 10m, action: release, job: older}
""")
    assert job(r, "newer")["runs"][0]["endReason"] == "Preempted"
    assert job(r, "older")["runs"][0]["start"] == 600.0


def test_fair_share_alternates_admission_by_weighted_dominant_share():
    jobs = "\n".join(
        f"  - {{name: {q}{i}, queue: {q}, duration: 1h, pods: [{{gpu: 1}}]}}" for q in "ab" for i in range(12)
    )
    r = replay(f"""
name: t
nodes: [{{name: n1, gpus: 12}}]
queues:
  - {{name: a, cohort: c, quota: {{gpu: 6}}, weight: 2}}
  - {{name: b, cohort: c, quota: {{gpu: 6}}, weight: 1}}
jobs:
{jobs}
""", until=60)
    running = [j for j in r["jobs"] if j["state"] == "Running"]
    per_queue = {q: sum(1 for j in running if j["queue"] == q) for q in "ab"}
    # 12 GPUs split 2:1 by weight, not first come first served.
    assert per_queue == {"a": 8, "b": 4}


def test_set_quota_stops_admission_but_kills_nothing():
    r = replay(NODES + """
queues:
  - {name: a, quota: {gpu: 24}}
jobs:
  - {name: r1, queue: a, duration: 2h, pods: [{gpu: 8}]}
  - {name: r2, queue: a, duration: 2h, pods: [{gpu: 8}]}
  - {name: later, queue: a, submit: 30m, duration: 1h, pods: [{gpu: 8}]}
events:
  - {at: 10m, action: setQuota, queue: a, quota: {gpu: 8}}
""")
    assert [run["endReason"] for run in job(r, "r1")["runs"]] == ["Finished"]
    assert [run["endReason"] for run in job(r, "r2")["runs"]] == ["Finished"]
    assert job(r, "later")["runs"][0]["start"] == 7200.0
