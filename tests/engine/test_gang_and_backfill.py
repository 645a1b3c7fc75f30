"""Gang admission, head-of-line behaviour, EASY backfill and start-time estimates."""

from conftest import job, replay

CLUSTER = """
name: t
nodeGroups:
  - {prefix: n, count: 2, template: {gpus: 8}}
queues:
  - {name: q}
"""


def test_gang_starts_whole_or_not_at_all_and_smaller_jobs_pass_it():
    r = replay(CLUSTER + """
jobs:
  - {name: holder, queue: q, duration: 1h, pods: [{gpu: 4}]}
  - {name: gang, queue: q, submit: 1s, duration: 1h, pods: [{count: 2, gpu: 8}]}
  - {name: small, queue: q, submit: 2s, duration: 30m, pods: [{gpu: 4}]}
""")
    gang = job(r, "gang")
    # Never half-started: its only run has both pods, and it waited for the holder to finish.
    assert len(gang["runs"]) == 1 and len(gang["runs"][0]["placements"]) == 2
    assert gang["runs"][0]["start"] == 3600.0
    # The smaller job behind the blocked gang started at once (it ends before the gang's turn).
    assert job(r, "small")["runs"][0]["start"] == 2.0


def test_without_a_reservation_a_blocked_head_blocks_nothing():
    # The holder never ends, so the gang can get no reservation; everything behind it runs.
    r = replay(CLUSTER + """
jobs:
  - {name: holder, queue: q, pods: [{gpu: 4}]}
  - {name: gang, queue: q, submit: 1s, duration: 1h, pods: [{count: 2, gpu: 8}]}
  - {name: small, queue: q, submit: 2s, duration: 5h, pods: [{gpu: 4}]}
""", until=3600)
    assert job(r, "gang")["state"] == "Pending"
    assert job(r, "gang")["estimatedStart"] is None
    assert job(r, "small")["runs"][0]["start"] == 2.0


def test_backfill_lets_short_jobs_through_and_holds_long_ones_for_the_reservation():
    r = replay(CLUSTER + """
jobs:
  - {name: a, queue: q, duration: 2h, pods: [{gpu: 8}]}
  - {name: big, queue: q, submit: 1m, duration: 1h, pods: [{count: 2, gpu: 8}]}
  - {name: short, queue: q, submit: 2m, duration: 1h, estimate: 1h, pods: [{gpu: 8}]}
  - {name: long, queue: q, submit: 3m, duration: 3h, estimate: 3h, pods: [{gpu: 8}]}
""")
    # short ends (by estimate) before a does, so it backfills onto the free node at once.
    assert job(r, "short")["runs"][0]["start"] == 120.0
    # big starts exactly when a ends: nothing delayed its reservation.
    assert job(r, "big")["runs"][0]["start"] == 7200.0
    # long would have run past that, so it waited until big was done.
    assert job(r, "long")["runs"][0]["start"] == 7200.0 + 3600.0


def test_pending_job_reports_reservation_reason_and_eta():
    r = replay(CLUSTER + """
jobs:
  - {name: a, queue: q, duration: 2h, pods: [{gpu: 8}]}
  - {name: big, queue: q, submit: 1m, duration: 1h, pods: [{count: 2, gpu: 8}]}
  - {name: long, queue: q, submit: 3m, duration: 3h, estimate: 3h, pods: [{gpu: 8}]}
""", until=600)
    big = job(r, "big")
    assert big["state"] == "Pending"
    assert big["pendingReason"] == "InsufficientCapacity"
    assert big["estimatedStart"] == 7200.0
    assert big["queuePosition"] == 1
    assert "16 GPUs" in big["message"] and "8 GPUs are free" in big["message"]
    long = job(r, "long")
    assert long["pendingReason"] == "ReservedForHigherPriority"
    assert "big" in long["message"] and "planned to start in 1h50m" in long["message"]
    assert long["queuePosition"] == 2
    assert long["estimatedStart"] == 7200.0 + 3600.0


def test_min_count_starts_a_smaller_gang_when_the_full_one_does_not_fit():
    r = replay(CLUSTER + """
jobs:
  - {name: elastic, queue: q, duration: 1h, minCount: 2, pods: [{count: 4, gpu: 8}]}
""")
    runs = job(r, "elastic")["runs"]
    assert runs[0]["start"] == 0.0 and len(runs[0]["placements"]) == 2


def test_ordering_within_a_queue_is_priority_then_submit_time():
    r = replay("""
name: t
priorityClasses: {high: 100}
nodes: [{name: n1, gpus: 1}]
queues: [{name: q}]
jobs:
  - {name: running, queue: q, duration: 1h, pods: [{gpu: 1}]}
  - {name: early, queue: q, submit: 1m, duration: 1h, pods: [{gpu: 1}]}
  - {name: late-high, queue: q, submit: 2m, priority: high, duration: 1h, pods: [{gpu: 1}]}
  - {name: later, queue: q, submit: 3m, duration: 1h, pods: [{gpu: 1}]}
""")
    starts = {j["name"]: j["runs"][0]["start"] for j in r["jobs"]}
    assert starts["late-high"] < starts["early"] < starts["later"]
