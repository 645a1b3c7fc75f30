"""Reservations on quota as on capacity (issue 33): a job that waits for its queue's quota, or
its cohort's, holds the backfill reservation like a job that waits for nodes, under every policy
that backfills; later jobs that would run past its planned start must leave it that quota."""

from __future__ import annotations

import pytest
from usher.engine.controller import Controller
from usher.engine.enums import PendingReason
from usher.engine.policy.registry import POLICIES, Backfill
from usher.engine.scenario import parse_scenario

BACKFILLING = [name for name, policy in POLICIES.items() if policy.backfill == Backfill.EASY]

#: the issue's case: one queue with a quota of 16 GPUs on four 8-GPU nodes
THREE_JOBS = """\
name: three-jobs
nodes: [{name: n1, gpus: 8}, {name: n2, gpus: 8}, {name: n3, gpus: 8}, {name: n4, gpus: 8}]
queues: [{name: team, quota: {gpu: 16}}]
jobs:
  - {name: train, queue: team, duration: 3h, pods: [{count: 2, gpu: 6}]}
  - {name: big, queue: team, submit: 1m, duration: 1h, pods: [{count: 2, gpu: 8}]}
  - {name: eval, queue: team, submit: 2m, duration: 6h, pods: [{count: 1, gpu: 4}]}
EVALS"""


def _replay(text: str, policy: str, until: float | None = None) -> Controller:
    ctrl = Controller(parse_scenario(text, file="quota-reservation.yaml"), policy)
    while ctrl.step():
        if until is not None and ctrl.now >= until:
            break
    return ctrl


def _starts(ctrl: Controller) -> dict[str, float | None]:
    return {job.name: (job.runs[0].start if job.runs else None) for job in ctrl.state.jobs}


@pytest.mark.parametrize("policy", BACKFILLING)
def test_a_job_waiting_for_its_queues_quota_is_not_passed_by_later_jobs(policy: str) -> None:
    """``big`` waits for quota (two nodes are free); ``eval``, later and 6 h long, would take
    the quota ``big`` needs when ``train`` ends at 3 h: it waits, and ``big`` starts at 3 h."""
    starts = _starts(_replay(THREE_JOBS.replace("EVALS", ""), policy))
    assert starts["big"] == 3 * 3600.0
    assert starts["eval"] is not None and starts["eval"] >= 4 * 3600.0  # after big's hour


@pytest.mark.parametrize("policy", BACKFILLING)
def test_a_stream_of_small_jobs_does_not_starve_the_big_one(policy: str) -> None:
    """Another ``eval`` every two hours would keep ``big`` waiting for ever without its
    reservation; with it, ``big`` still starts when ``train`` ends."""
    evals = "".join(
        f"  - {{name: eval{i}, queue: team, submit: {600 + 7200 * i}, duration: 6h, pods: [{{count: 1, gpu: 4}}]}}\n"
        for i in range(6)
    )
    starts = _starts(_replay(THREE_JOBS.replace("EVALS", evals), policy))
    assert starts["big"] == 3 * 3600.0


@pytest.mark.parametrize("policy", BACKFILLING)
def test_the_waiting_job_holds_a_reservation_on_its_quota(policy: str) -> None:
    """While it waits, ``big`` holds the reservation with a start at 3 h, and ``eval`` says it is
    kept for ``big`` rather than that it waits for quota."""
    ctrl = _replay(THREE_JOBS.replace("EVALS", ""), policy, until=120)
    jobs = {job.name: job for job in ctrl.state.jobs}
    assert ctrl.state.reservation == (jobs["big"].id, 3 * 3600.0)
    assert jobs["big"].pending_reason == PendingReason.WAITING_FOR_QUOTA
    assert jobs["eval"].pending_reason == PendingReason.RESERVED_FOR_HIGHER_PRIORITY


@pytest.mark.parametrize("policy", BACKFILLING)
def test_a_short_job_ending_before_the_planned_start_still_backfills(policy: str) -> None:
    """A job that ends (by its estimate) before the holder's start may use the quota meanwhile."""
    text = THREE_JOBS.replace("EVALS", "  - {name: quick, queue: team, submit: 3m, duration: 1h, estimate: 2h, pods: [{gpu: 4}]}\n")
    starts = _starts(_replay(text, policy))
    assert starts["quick"] == 180.0
    assert starts["big"] == 3 * 3600.0


FREED_BY_THEN = """\
name: freed-by-then
nodes: [{name: n1, gpus: 8}, {name: n2, gpus: 8}, {name: n3, gpus: 8}, {name: n4, gpus: 8}]
queues: [{name: team, quota: {gpu: 16}}]
jobs:
  - {name: short, queue: team, duration: 2h, pods: [{gpu: 8}]}
  - {name: long, queue: team, duration: 3h, pods: [{gpu: 4}]}
  - {name: big, queue: team, submit: 1m, duration: 1h, pods: [{gpu: 8}]}
  - {name: eval, queue: team, submit: 2m, duration: 6h, pods: [{gpu: 4}]}
"""


@pytest.mark.parametrize("policy", BACKFILLING)
def test_a_later_job_may_take_quota_the_holder_will_not_need_at_its_start(policy: str) -> None:
    """``big`` (8 GPUs) waits for ``short`` to give back its 8 at 2 h. ``eval`` (4 GPUs, 6 h) would
    run past that, but at 2 h the queue holds ``long``'s 4, ``big``'s 8 and its 4: 16, the quota.
    It starts at once, and ``big`` still at 2 h (counting today's usage, ``eval`` waited 3 h)."""
    starts = _starts(_replay(FREED_BY_THEN, policy))
    assert starts["eval"] == 120.0
    assert starts["big"] == 2 * 3600.0


@pytest.mark.parametrize("policy", BACKFILLING)
def test_a_later_job_that_would_leave_the_holder_short_at_its_start_waits(policy: str) -> None:
    """The same with ``eval`` asking 5 GPUs: at 2 h the queue would hold 17 of its 16, so it
    waits for ``big``."""
    starts = _starts(_replay(FREED_BY_THEN.replace("6h, pods: [{gpu: 4}]", "6h, pods: [{gpu: 5}]"), policy))
    assert starts["big"] == 2 * 3600.0
    assert starts["eval"] is not None and starts["eval"] >= 2 * 3600.0


COHORT = """\
name: cohort-reservation
nodes: [{name: n1, gpus: 8}, {name: n2, gpus: 8}, {name: n3, gpus: 8}, {name: n4, gpus: 8}]
queues:
  - {name: a, cohort: c, quota: {gpu: 8}}
  - {name: b, cohort: c, quota: {gpu: 8}}
jobs:
  - {name: b-run, queue: b, duration: 2h, pods: [{gpu: 8}]}
  - {name: a-run, queue: a, duration: 1h, pods: [{gpu: 4}]}
  - {name: a-big, queue: a, submit: 1m, duration: 1h, pods: [{count: 3, gpu: 4}]}
  - {name: b-late, queue: b, submit: 2m, duration: 8h, pods: [{gpu: 8}]}
"""


@pytest.mark.parametrize("policy", BACKFILLING)
def test_a_job_borrowing_from_its_cohort_keeps_the_quota_it_waits_for(policy: str) -> None:
    """``a-big`` (12 GPUs) needs its own 8 and 4 borrowed from ``b``: the cohort's 16 have room
    once ``b-run`` ends (2 h). When ``a-run`` ends (1 h), ``b-late`` could borrow ``a``'s 8 for
    8 h and push ``a-big`` back to 9 h: it waits for ``a-big`` instead."""
    starts = _starts(_replay(COHORT, policy))
    assert starts["a-big"] == 2 * 3600.0
    assert starts["b-late"] is not None and starts["b-late"] >= 3 * 3600.0


@pytest.mark.parametrize("policy", BACKFILLING)
def test_quota_the_holder_may_not_have_is_not_kept_from_others(policy: str) -> None:
    """A reservation keeps only what the holder may have: ``b`` lends nothing, so ``b-late``
    within ``b``'s own quota starts at once beside ``a-big``, which waits for ``a``'s own."""
    text = COHORT.replace("{name: b, cohort: c, quota: {gpu: 8}}", "{name: b, cohort: c, quota: {gpu: 8}, lendingLimit: {gpu: 0}}")
    text = text.replace("  - {name: b-run, queue: b, duration: 2h, pods: [{gpu: 8}]}\n", "")
    text = text.replace("count: 3, gpu: 4", "count: 2, gpu: 4")
    starts = _starts(_replay(text, policy))
    assert starts["a-big"] == 3600.0
    assert starts["b-late"] == 120.0


KNOCKED_OUT = """\
name: knocked-out
nodes: [{name: n1, gpus: 8}, {name: n2, gpus: 8}, {name: n3, gpus: 8}, {name: n4, gpus: 8}]
queues: [{name: team, quota: {gpu: 16}}]
jobs:
  - {name: train, queue: team, duration: 3h, pods: [{gpu: 8}]}
  - {name: old, queue: team, duration: 10h, pods: [{gpu: 4}]}
  - {name: big, queue: team, submit: 1m, duration: 1h, pods: [{count: 2, gpu: 8}]}
  - {name: later, queue: team, submit: 2m, duration: 10h, pods: [{gpu: 4}]}
events:
  - {at: 1h, action: fail, node: NODE}
"""


@pytest.mark.parametrize("policy", BACKFILLING)
def test_a_job_that_lost_its_node_is_not_held_back_by_a_later_holder(policy: str) -> None:
    """``old`` ran before ``big`` waited; its node fails at 1 h. It is no later job, so it starts
    again at once although that moves ``big``'s start (a failure may move a reservation), while
    ``later``, of the same size and length but submitted after ``big``, still waits for it."""
    ctrl = Controller(parse_scenario(KNOCKED_OUT.replace("NODE", "n2"), file="knocked.yaml"), policy)
    jobs = {job.name: job for job in ctrl.state.jobs}
    ctrl.run_to_end()
    assert [run.start for run in jobs["old"].runs] == [0.0, 3600.0]
    assert jobs["later"].runs[0].start >= jobs["big"].runs[0].start
