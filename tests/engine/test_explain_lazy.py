"""Lazy why-pending explanations and the start-time planner's shortcuts (issue 14).

``explain_all`` settles reasons and positions at once and leaves each message and the planned
starts to when they are read; ``estimate_starts`` skips, within a step, the shapes that failed
and the rest of a step once every shape left has failed, and re-runs the placer for a one-domain
gang only when a domain it could fit in changed. Neither may change a figure: the planner is
checked here against the plain loop it replaces (every job tried at every release), on a busy
replay at many moments.
"""

from __future__ import annotations

import heapq
import sys
from pathlib import Path

import pytest
from usher.engine import explain
from usher.engine.controller import Controller
from usher.engine.enums import PendingReason
from usher.engine.explain import Explanation, explain_all, planner_order
from usher.engine.policy import backfill, quota
from usher.engine.policy.placement import Placer, request_of
from usher.engine.scenario import parse_scenario
from usher.engine.state import INF, ClusterState, Job

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import workloads  # bench/ is not a package


def plain_estimate_starts(state: ClusterState, order: list[Job], now: float) -> dict[int, float]:
    """The planner without its shortcuts: at every release, every pending job in order (a shape
    that failed placement or quota is skipped for the rest of that release only); run times
    scaled as the planner scales them (``ClusterState.runtime_scale``)."""
    out: dict[int, float] = {}
    pending = order[: backfill.PLAN_DEPTH]
    scale = backfill.runtime_scales(state)
    heap = sorted((max(backfill._scaled_end(state, j, end, scale(state.jobs[j].queue)), now), seq, j) for end, seq, j in state.ends if end != INF)
    released: list[Job] = []
    planned: list[tuple[Job, list, tuple]] = []
    live: set[int] = set()
    reservation = state.reservation
    try:
        while heap and pending:
            t = heap[0][0]
            while heap and heap[0][0] == t:
                _, _, ref = heapq.heappop(heap)
                if ref >= 0:
                    job = state.jobs[ref]
                    assert job.current_run is not None
                    state.unplace(job, job.current_run.placements)
                    backfill._usage(state, job.queue, job.charged, -1)
                    released.append(job)
                else:
                    job, taken, req = planned[~ref]
                    state.unplace(job, taken)
                    backfill._usage(state, job.queue, req, -1)
                    live.discard(~ref)
            failed: set[tuple] = set()
            still: list[Job] = []
            for job in pending:
                counts = [g.count for g in job.groups]
                shape = (job.queue, job.groups)
                waiting = reservation is not None and reservation[0] == job.id and t < reservation[1]
                if waiting or shape in failed or backfill.quick_reject(state, job, counts):
                    still.append(job)
                    continue
                req = request_of(job, counts)
                placer = Placer(state)
                if not quota.check(state, state.queues[job.queue], req).fits or not placer.place_gang(job, counts):
                    failed.add(shape)
                    still.append(job)
                    continue
                out[job.id] = t
                backfill._usage(state, job.queue, req, +1)
                planned.append((job, list(placer.taken), req))
                live.add(len(planned) - 1)
                runtime = job.estimated_runtime()
                if runtime != INF:
                    heapq.heappush(heap, (t + runtime * scale(job.queue), job.seq, ~(len(planned) - 1)))
            pending = still
    finally:
        for i in sorted(live, reverse=True):
            job, taken, req = planned[i]
            state.unplace(job, taken)
            backfill._usage(state, job.queue, req, -1)
        for job in reversed(released):
            assert job.current_run is not None
            state.place(job, job.current_run.placements)
            backfill._usage(state, job.queue, job.charged, +1)
    return out


def free_figures(state: ClusterState) -> tuple:
    """Everything the planner borrows and must give back."""
    return (
        state.total_whole_free,
        [(tuple(n.gpu_free), n.whole_free, n.cpu_free, n.mem_free) for n in state.nodes],
        [tuple(q.usage) for q in state.queues.values()],
        [d.whole_free for level in state.domains for d in level],
    )


def busy_controller() -> Controller:
    """A small cluster at 3x offered load: a backlog of gangs that need a rack, and single pods."""
    return Controller(parse_scenario(workloads.b2_busy(nodes=32, jobs=1200, days=0.5, load=3.0), file="busy.yaml"))


def test_the_planner_gives_the_plain_loops_starts_at_every_moment_of_a_busy_replay() -> None:
    ctrl = busy_controller()
    checked = deepest = 0
    steps = 0
    while ctrl.next_time() is not None:
        ctrl.step()
        steps += 1
        if steps % 30:
            continue
        state = ctrl.state
        order = planner_order(state)
        before = free_figures(state)
        expected = plain_estimate_starts(state, order, ctrl.now)
        assert backfill.estimate_starts(state, order, ctrl.now) == expected, f"at {ctrl.now}"
        assert free_figures(state) == before
        checked += 1
        deepest = max(deepest, len(order))
    assert checked > 50 and deepest > 100  # the replay did build a backlog


def test_explanations_are_worked_out_when_read_and_the_planner_runs_once(monkeypatch: pytest.MonkeyPatch) -> None:
    ctrl = busy_controller()
    while ctrl.next_time() is not None and sum(len(q.pending) for q in ctrl.state.queues.values()) < 80:
        ctrl.step()
    state, now = ctrl.state, ctrl.now
    runs = []
    real = explain.estimate_starts

    def counting(*args):
        runs.append(1)
        return real(*args)

    monkeypatch.setattr(explain, "estimate_starts", counting)
    answer = explain_all(state, now)
    assert len(answer) > 50
    reasons = {job_id: e.reason for job_id, e in answer.items()}
    assert not runs, "reasons and positions need no planning"
    some = next(iter(answer.values()))
    assert some.message and not runs, "a message needs no planning"
    starts = {job_id: e.estimated_start for job_id, e in answer.items()}
    assert len(runs) == 1, "one planner run answers every ETA"
    planned = real(state, planner_order(state), now)
    for job_id, e in answer.items():
        job = state.jobs[job_id]
        assert e.reason == reasons[job_id] == (job.pending_reason or PendingReason.INSUFFICIENT_CAPACITY)
        assert e.message == explain.message(state, job, e.reason, now)
        no_eta = e.reason in (PendingReason.HELD, PendingReason.AWAITING_APPROVAL, PendingReason.EXCEEDS_QUOTA)
        assert starts[job_id] == (None if no_eta else planned.get(job_id))
    assert any(s is not None for s in starts.values())


def test_an_explanation_made_by_hand_holds_its_values_and_compares_by_them() -> None:
    made = Explanation(PendingReason.HELD, "held", 3, None)
    assert (made.reason, made.message, made.queue_position, made.estimated_start) == (PendingReason.HELD, "held", 3, None)
    assert made == Explanation(PendingReason.HELD, "held", 3, None)
    assert made != Explanation(PendingReason.HELD, "held", 4, None)
    verdict = made.with_verdict(PendingReason.INSUFFICIENT_CAPACITY, "no room")
    assert (verdict.reason, verdict.message, verdict.queue_position) == (PendingReason.INSUFFICIENT_CAPACITY, "no room", 3)
