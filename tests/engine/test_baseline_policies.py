"""The named baselines behave like the schedulers they stand for, on scenarios built to tell them apart."""

from __future__ import annotations

import textwrap
from dataclasses import replace

import pytest
from conftest import job, nodes_of, replay

from usher.engine.controller import Controller
from usher.engine.policy.registry import ReserveFor, get_policy
from usher.engine.report import build_report
from usher.engine.scenario import parse_scenario

RACKS = """
name: t
topology: {levels: [usher/rack, kubernetes.io/hostname]}
nodeGroups:
  - {prefix: n, count: 4, layout: {usher/rack: 2}, template: {gpus: 8}}
queues: [{name: q}]
"""

# Two 3-pod gangs on four 8-GPU nodes: only one can run at a time.
DEADLOCK = RACKS + """
jobs:
  - {name: a, queue: q, duration: 1h, pods: [{count: 3, gpu: 8}]}
  - {name: b, queue: q, duration: 1h, pods: [{count: 3, gpu: 8}]}
"""

GANG_POLICIES = ["usher", "kueue", "volcano", "slurm", "fifo"]


def test_kube_default_binds_pod_by_pod_and_two_gangs_deadlock():
    r = replay(DEADLOCK, policy="kube-default")
    assert r["summary"]["gangsDeadlocked"] == 2
    assert r["summary"]["finished"] == 0
    for name in ("a", "b"):
        j = job(r, name)
        # Each holds two of its three pods for good and never starts to work.
        assert j["state"] == "Pending"
        assert len(j["runs"]) == 1 and len(j["runs"][0]["placements"]) == 2
        assert j["runs"][0]["workStart"] is None and j["runs"][0]["endReason"] == "Running"
        assert j["message"].startswith("Holds 2 of its 3 pods (16 GPUs) without working")
    held = nodes_of(job(r, "a")["runs"][0]) + nodes_of(job(r, "b")["runs"][0])
    assert sorted(held) == ["n-01", "n-02", "n-03", "n-04"]


@pytest.mark.parametrize("policy", GANG_POLICIES)
def test_gang_policies_run_the_same_gangs_one_after_the_other(policy):
    r = replay(DEADLOCK, policy=policy)
    assert r["summary"]["gangsDeadlocked"] == 0 and r["summary"]["finished"] == 2
    starts = sorted(job(r, n)["runs"][0]["start"] for n in ("a", "b"))
    assert starts == [0.0, 3600.0]
    assert all(len(job(r, n)["runs"][0]["placements"]) == 3 for n in ("a", "b"))


HOLDER = """
name: t
nodeGroups: [{prefix: n, count: 2, template: {gpus: 8}}]
queues: [{name: q}]
jobs:
  - {name: holder, queue: q, duration: 1h, pods: [{gpu: 8}]}
  - {name: gang, queue: q, submit: 10s, duration: 1h, pods: [{count: 2, gpu: 8}]}
"""


def test_kube_default_gang_holds_gpus_until_its_last_pod_fits_and_its_wait_ends_then():
    r = replay(HOLDER, policy="kube-default")
    run = job(r, "gang")["runs"][0]
    assert run["start"] == 10.0 and run["workStart"] == 3600.0 and run["end"] == 7200.0
    assert [p.get("since") for p in run["placements"]] == [None, 3600.0]
    s = r["summary"]
    # Wait counts to the moment the gang could work: (0 + 3590) / 2 jobs.
    assert s["avgWaitSeconds"] == 1795.0 and s["gangsDeadlocked"] == 0
    # 8 of 16 GPUs held without work for 3590 of 7200 seconds.
    assert s["gpuHeldIdle"] == round(8 * 3590 / (16 * 7200), 6)
    # A gang scheduler holds nothing while the gang waits.
    usher = replay(HOLDER)
    assert job(usher, "gang")["runs"][0]["start"] == 3600.0 and usher["summary"]["gpuHeldIdle"] == 0.0


def test_kube_default_affinity_makes_a_gang_wait_beside_a_full_rack():
    text = RACKS + """
jobs:
  - {name: busy, queue: q, duration: 1h, pods: [{gpu: 8}]}
  - {name: gang, queue: q, submit: 1s, duration: 1h, pods: [{count: 2, gpu: 8, topology: {required: usher/rack}}]}
"""
    # busy sits on n-01; the gang's first pod goes first fit to n-02 (rack 1), and its second pod
    # may only join it in rack 1, which is full until busy ends, though rack 2 is empty.
    run = job(replay(text, policy="kube-default"), "gang")["runs"][0]
    assert nodes_of(run) == ["n-02", "n-01"]
    assert run["start"] == 1.0 and run["workStart"] == 3600.0
    # A gang scheduler puts the whole gang into the empty rack at once.
    run = job(replay(text), "gang")["runs"][0]
    assert run["start"] == 1.0 and sorted(nodes_of(run)) == ["n-03", "n-04"]


COHORT = """
name: t
nodeGroups: [{prefix: n, count: 2, template: {gpus: 8}}]
queues:
  - {name: a, cohort: c, quota: {gpu: 8}}
  - {name: b, cohort: c, quota: {gpu: 8}}
jobs:
  - {name: a1, queue: a, duration: 1h, pods: [{gpu: 8}]}
  - {name: a2, queue: a, duration: 1h, pods: [{gpu: 8}]}
"""


def test_kube_default_quota_is_a_namespace_resource_quota_without_borrowing():
    kube = replay(COHORT, policy="kube-default")
    assert sorted(job(kube, n)["runs"][0]["start"] for n in ("a1", "a2")) == [0.0, 3600.0]
    for policy in ("usher", "kueue"):
        borrowed = replay(COHORT, policy=policy)
        assert [job(borrowed, n)["runs"][0]["start"] for n in ("a1", "a2")] == [0.0, 0.0]


def test_bin_packing_fills_the_used_node_and_first_fit_takes_the_first():
    packed = """
name: t
nodeGroups: [{prefix: n, count: 2, template: {gpus: 8}}]
queues: [{name: q}]
jobs:
  - {name: first, queue: q, duration: 1h, pods: [{gpu: 8}]}
  - {name: seven, queue: q, duration: 3h, pods: [{gpu: 7}]}
  - {name: one, queue: q, submit: 2h, duration: 1h, pods: [{gpu: 1}]}
"""
    # At 2h, n-01 is empty again and n-02 has one GPU free.
    for policy in ("usher", "volcano", "slurm"):
        assert nodes_of(job(replay(packed, policy=policy), "one")["runs"][0]) == ["n-02"], policy
    for policy in ("kueue", "kube-default"):
        assert nodes_of(job(replay(packed, policy=policy), "one")["runs"][0]) == ["n-01"], policy


BACKFILL = """
name: t
nodeGroups: [{prefix: n, count: 2, template: {gpus: 8}}]
queues: [{name: q}]
jobs:
  - {name: a, queue: q, duration: 2h, pods: [{gpu: 8}]}
  - {name: big, queue: q, submit: 1m, duration: 1h, pods: [{count: 2, gpu: 8}]}
  - {name: long, queue: q, submit: 3m, duration: 3h, pods: [{gpu: 8}]}
"""


@pytest.mark.parametrize("policy", ["usher", "slurm"])
def test_easy_backfill_holds_a_long_job_back_for_the_blocked_gang(policy):
    r = replay(BACKFILL, policy=policy)
    assert job(r, "big")["runs"][0]["start"] == 7200.0
    assert job(r, "long")["runs"][0]["start"] == 7200.0 + 3600.0


@pytest.mark.parametrize("policy", ["kueue", "volcano"])
def test_without_backfill_the_long_job_jumps_ahead_and_the_gang_waits(policy):
    r = replay(BACKFILL, policy=policy)
    assert job(r, "long")["runs"][0]["start"] == 180.0
    assert job(r, "big")["runs"][0]["start"] == 180.0 + 3 * 3600.0


ORDER = """
name: t
priorityClasses: {high: 100}
nodes: [{name: n1, gpus: 2}]
queues: [{name: a}, {name: b}]
jobs:
  - {name: a-running, queue: a, duration: 1h, pods: [{gpu: 1}]}
  - {name: b-running, queue: b, duration: 30m, pods: [{gpu: 1}]}
  - {name: a-high, queue: a, submit: 1m, priority: high, duration: 1h, pods: [{gpu: 1}]}
  - {name: b-low, queue: b, submit: 2m, duration: 1h, pods: [{gpu: 1}]}
"""


def test_when_a_gpu_frees_drf_serves_the_lower_share_queue_and_priority_order_the_higher_priority():
    # At 30m one GPU frees; queue a holds one GPU, queue b none.
    assert job(replay(ORDER, policy="volcano"), "b-low")["runs"][0]["start"] == 1800.0
    for policy in ("slurm", "kueue", "kube-default"):
        assert job(replay(ORDER, policy=policy), "a-high")["runs"][0]["start"] == 1800.0, policy


def test_usher_honours_the_reservation_of_the_most_urgent_blocked_job_over_the_fair_share_order():
    # a-high, blocked since 1m with the highest priority, holds the reservation for 30m; when it
    # comes due, fair share (which would serve queue b) does not take it away.
    r = replay(ORDER)
    assert job(r, "a-high")["runs"][0]["start"] == 1800.0
    assert job(r, "b-low")["runs"][0]["start"] == 3600.0


def test_only_usher_and_kueue_preempt():
    text = """
name: t
priorityClasses: {high: 100}
nodes: [{name: n1, gpus: 8}]
queues: [{name: q, preemption: {withinQueue: LowerPriority}}]
jobs:
  - {name: low, queue: q, duration: 2h, pods: [{gpu: 8}]}
  - {name: urgent, queue: q, submit: 10m, priority: high, duration: 1h, pods: [{gpu: 8}]}
"""
    for policy in ("usher", "kueue"):
        assert replay(text, policy=policy)["summary"]["preemptions"] == 1, policy
    for policy in ("volcano", "slurm", "kube-default", "fifo"):
        r = replay(text, policy=policy)
        assert r["summary"]["preemptions"] == 0 and job(r, "urgent")["runs"][0]["start"] == 7200.0, policy


STARVED = """
name: t
nodeGroups: [{prefix: n, count: 2, template: {gpus: 8}}]
queues: [{name: a}, {name: b}]
jobs:
  - {name: r1, queue: a, duration: 1h, pods: [{gpu: 8}]}
  - {name: r2, queue: a, duration: 3h, pods: [{gpu: 8}]}
  - {name: gang, queue: a, submit: 1m, duration: 1h, pods: [{count: 2, gpu: 8}]}
  - {name: other, queue: b, submit: 1m, duration: 4h, pods: [{gpu: 8}]}
"""


def _replay_with(text: str, policy) -> dict:
    ctrl = Controller(parse_scenario(textwrap.dedent(text), file="t.yaml"), policy)
    ctrl.run_to_end()
    return build_report(ctrl)


def test_most_urgent_reservation_keeps_a_big_gang_from_being_starved_by_fair_share():
    # Queue a holds everything, so fair share puts b's job first; with the reservation for the
    # first blocked job, b's job gets it and the gang waits for it too. usher reserves for the
    # oldest blocked job instead: the gang starts when r2 ends, and b's job after it. (Both are
    # submitted together: had the gang been blocked a cycle earlier, first-blocked would now keep
    # its reservation too, since a reservation stays with its holder until it starts.)
    usher = _replay_with(STARVED, get_policy("usher"))
    assert job(usher, "gang")["runs"][0]["start"] == 3 * 3600.0
    assert job(usher, "other")["runs"][0]["start"] == 4 * 3600.0
    first_blocked = _replay_with(STARVED, replace(get_policy("usher"), reserve_for=ReserveFor.FIRST_BLOCKED))
    assert job(first_blocked, "other")["runs"][0]["start"] == 3600.0
    assert job(first_blocked, "gang")["runs"][0]["start"] == 5 * 3600.0


def test_kube_default_quota_message_counts_the_nominal_quota_alone():
    r = replay(COHORT, policy="kube-default", until=60)
    a2 = job(r, "a2")
    assert a2["pendingReason"] == "WaitingForQuota"
    assert (
        "uses 8 of its 8 GPUs of nominal quota and no queue borrows under this policy, so 0 GPUs are left for it now."
        in a2["message"]
    ), a2["message"]
    assert "lend" not in a2["message"]
