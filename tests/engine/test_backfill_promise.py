"""EASY backfill's promise (issue 15): a job started by backfill never delays a reservation.

Every cycle's reservation (holder and planned start) is recorded over a replay. Where nothing
that may move a reservation happens (one priority, so no higher-priority arrival; no node
failure or drain; no operator action; estimates that are upper bounds of the run times, as
Slurm's time limits are), each holder must start no later than the earliest start it was
promised, under every policy that backfills. Queues share the cluster by fair share, sometimes
under cohort quotas they borrow from each other and take back by preemption, gangs need one
rack, and some pods share GPUs,
so the jobs started beside a reservation are of every kind. ``bench/promise.py`` counts the late
holders of bigger replays, and of those where something may move a reservation.

The bound on waiting (issue 33) is checked for every blocked job, not only the holders: many
drawn clusters are bound by quota rather than capacity (one queue's quota below the cluster's
GPUs, or cohort quotas lent between queues), and no job may keep waiting for quota or capacity
while nobody holds the reservation.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from usher.engine.controller import Controller
from usher.engine.reservations import BLOCKED_REASONS
from usher.engine.policy.backfill import plan_reservation
from usher.engine.policy.placement import gang_counts
from usher.engine.policy.registry import POLICIES, Backfill
from usher.engine.scenario import parse_scenario

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import promise  # bench/ is not a package
from promise import late_holders

BACKFILLING = [name for name, policy in POLICIES.items() if policy.backfill == Backfill.EASY]


@st.composite
def busy_scenarios(draw: st.DrawFn) -> str:
    """A small cluster in racks, up to three queues and a stream of jobs that keeps it full;
    often bound by quota rather than capacity: one queue whose quota is below the cluster (or
    equals it), or queues whose cohort quotas lend to each other."""
    racks = draw(st.integers(1, 3))
    per_rack = draw(st.integers(2, 4))
    gpus = racks * per_rack * 8
    lines = [
        "name: promise",
        "topology: {levels: [usher/rack, kubernetes.io/hostname]}",
        "nodeGroups:",
        f"  - {{prefix: n, count: {racks * per_rack}, layout: {{usher/rack: {per_rack}}}, template: {{gpus: 8, cpu: 64}}}}",
        "queues:",
    ]
    queues = [f"q{i}" for i in range(draw(st.integers(1, 3)))]
    # capacity alone; one quota per queue below the cluster's GPUs (or all of them); or cohort
    # quotas that queues borrow from each other
    bound = draw(st.sampled_from(["capacity", "queue", "cohort"]))
    extra = ""
    if bound == "queue":
        extra = f", quota: {{gpu: {draw(st.integers(8, gpus))}}}"
    elif bound == "cohort":
        extra = f", cohort: c, quota: {{gpu: {draw(st.integers(4, gpus))}}}"
        if draw(st.booleans()):
            extra += ", preemption: {reclaimWithinCohort: Any}"  # queues take their quota back by preemption
    lines += [f"  - {{name: {q}, weight: {draw(st.integers(1, 3))}{extra}}}" for q in queues]
    lines.append("jobs:")
    for i in range(draw(st.integers(8, 40))):
        count = draw(st.integers(1, per_rack))
        gpu = draw(st.sampled_from([0.5, 1, 2, 4, 8]))
        topo = ", topology: {required: usher/rack}" if count > 1 and gpu >= 1 else ""
        duration = draw(st.integers(60, 20000))
        estimate = duration + draw(st.integers(0, duration))
        lines.append(
            f"  - {{name: j{i}, queue: {draw(st.sampled_from(queues))}, submit: {draw(st.integers(0, 20000))}, "
            f"duration: {duration}, estimate: {estimate}, pods: [{{count: {count}, gpu: {gpu}, cpu: {draw(st.integers(0, 16))}{topo}}}]}}"
        )
    return "\n".join(lines) + "\n"


def waits_without_a_reservation(text: str, policy: str) -> list[str]:
    """Each moment a job kept waiting for quota or capacity (blocked at two moments running)
    while no job held the reservation, other than when a job blocked before started then (the
    holder: the next is chosen from what the last cycle found blocked).

    With one priority and estimates that are upper bounds, this bounds every blocked job's
    wait, not only the holders': the most urgent blocked job holds the reservation from the
    moment after it is blocked, starts by its promised start (the property above), and the next
    one holds it from then. A job that waits for quota and never holds it is passed by every
    later job of its queue as the quota frees, for ever (issue 33)."""
    ctrl = Controller(parse_scenario(text, file="bound.yaml"), policy)
    jobs = ctrl.state.jobs
    blocked_before: set[int] = set()
    found: list[str] = []
    while ctrl.step():
        state = ctrl.state
        blocked = {
            job.id
            for q in state.queues.values()
            for *_, jid in q.pending
            if (job := jobs[jid]).pending_reason in BLOCKED_REASONS and not job.held
        }
        holder = state.reservation[0] if state.reservation is not None else None
        kept_waiting = blocked & blocked_before
        holder_started = any(jobs[jid].runs for jid in blocked_before - blocked)
        if holder is None and kept_waiting and not holder_started:
            names = sorted(jobs[jid].name for jid in kept_waiting)
            found.append(f"at {ctrl.now:g}: {', '.join(names)} waited ({jobs[min(kept_waiting)].pending_reason}) and nobody held the reservation")
        blocked_before = blocked
    return found


def promises_broken(text: str, policy: str) -> list[str]:
    """Each holder that started after the earliest start a reservation promised it."""
    return late_holders(text, policy)[1]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text=busy_scenarios(), policy=st.sampled_from(BACKFILLING))
def test_a_reservation_is_never_pushed_back_by_backfill(text: str, policy: str) -> None:
    assert promises_broken(text, policy) == []


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text=busy_scenarios(), policy=st.sampled_from(BACKFILLING))
def test_every_blocked_job_is_reserved_for_in_turn(text: str, policy: str) -> None:
    """The bound on waiting, for every blocked job, whether quota or capacity blocks it: no job
    keeps waiting while nobody holds the reservation, so each in turn is promised a start that
    later jobs may not delay."""
    assert waits_without_a_reservation(text, policy) == []


def test_the_promise_is_tested_on_reservations_that_matter() -> None:
    """A fixed busy case (``bench/promise.py``'s three fair-share queues): many holders, every one
    started by its promised start. Planning afresh every cycle (the old way) breaks it here, so
    the property above can fail."""
    text = promise.scenario(0, "queues")
    holders, late, _ = late_holders(text, "usher")
    assert holders > 20
    assert late == []
    for policy in BACKFILLING:
        assert promises_broken(text, policy) == []


PREEMPTOR_BESIDE_HOLDER = """\
name: preemptor-beside-holder
priorityClasses: {low: 10, high: 100}
nodes: [{name: n1, gpus: 8}, {name: n2, gpus: 8}]
queues: [{name: train}, {name: batch, preemption: {withinQueue: LowerPriority}}]
jobs:
  - {name: sweep, queue: batch, priority: low, duration: 36000, pods: [{count: 1, gpu: 8}]}
  - {name: eval, queue: train, priority: high, preemptible: false, duration: 3600, pods: [{count: 1, gpu: 8}]}
  - {name: pretrain, queue: train, priority: high, submit: 60, duration: 3600, pods: [{count: 2, gpu: 8}]}
  - {name: finetune, queue: batch, priority: PRIORITY, submit: 600, duration: 72000, pods: [{count: 1, gpu: 8}]}
"""


def _runs(text: str, policy: str) -> dict[str, list[tuple[float, float | None]]]:
    ctrl = Controller(parse_scenario(text, file="preemptor.yaml"), policy)
    while ctrl.step():
        pass
    return {job.name: [(run.start, run.end) for run in job.runs] for job in ctrl.state.jobs}


def test_a_preemptor_of_equal_priority_leaves_the_holder_its_nodes() -> None:
    """``pretrain`` waits for both nodes and is promised the start when ``sweep`` ends (10 h).
    ``finetune``, as urgent as ``pretrain`` but later and far longer, could take ``sweep``'s node
    now by preemption; that would push ``pretrain`` back by 20 hours, so it waits instead."""
    runs = _runs(PREEMPTOR_BESIDE_HOLDER.replace("PRIORITY", "high"), "usher")
    assert runs["sweep"] == [(0.0, 36000.0)]  # never preempted
    assert runs["pretrain"][0][0] == 36000.0
    assert runs["finetune"][0][0] >= runs["pretrain"][0][1]


def test_a_preemptor_of_higher_priority_may_move_the_reservation() -> None:
    """The same, with ``finetune`` more urgent than the holder: it preempts ``sweep`` at once."""
    text = PREEMPTOR_BESIDE_HOLDER.replace("PRIORITY", "urgent").replace("{low: 10, high: 100}", "{low: 10, high: 100, urgent: 1000}")
    runs = _runs(text, "usher")
    assert runs["sweep"][0] == (0.0, 600.0)
    assert runs["finetune"][0][0] == 600.0
    assert runs["pretrain"][0][0] > 36000.0


QUOTA_BOUND_HOLDER = """\
name: quota-bound-holder
nodes: [{name: n1, gpus: 8}, {name: n2, gpus: 8}, {name: n3, gpus: 8}]
queues: [{name: a, cohort: c, quota: {gpu: 8}}, {name: b, cohort: c, quota: {gpu: 8}}]
jobs:
  - {name: b-long, queue: b, duration: 36000, pods: [{count: 1, gpu: 8}]}
  - {name: a-short, queue: a, duration: 3600, pods: [{count: 1, gpu: 8}]}
  - {name: a-big, queue: a, submit: 60, duration: 3600, pods: [{count: 2, gpu: 8}]}
"""


def test_a_planned_start_leaves_room_for_the_holders_quota() -> None:
    """``a-big`` has the GPUs once ``a-short`` ends (1 h), but the cohort's 16 GPUs of quota only
    once ``b-long`` ends too (10 h): a reservation for it (a holder keeps its reservation while it
    waits for quota) plans 10 h, so that the promise can be kept."""
    ctrl = Controller(parse_scenario(QUOTA_BOUND_HOLDER, file="quota.yaml"), "usher")
    while ctrl.now < 60:
        ctrl.step()
    big = next(job for job in ctrl.state.jobs if job.name == "a-big")
    plan = plan_reservation(ctrl.state, big, gang_counts(big, False), ctrl.now)
    assert plan is not None and plan.start == 36000.0
