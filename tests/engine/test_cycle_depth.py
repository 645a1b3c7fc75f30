"""A cycle's work follows the kinds of job waiting, not the backlog (issues 14 and 34).

The depth table's shape (``bench/run.py depth``), scaled down: two queues in a cohort whose quota
binds, jobs of a dozen kinds, and a job blocked for quota holding the backfill reservation, so
that most waiting jobs would run past its start and are held back. The cycle reports how many
pending jobs its walk reached one by one (``CycleResult.walked``); the rest it marks through their
reason cells. With four times the backlog the walk must reach about as many jobs, not four times
as many. Counting jobs, not timing them, keeps the test deterministic.
"""

from __future__ import annotations

import sys
from pathlib import Path

from usher.engine.controller import Controller
from usher.engine.scenario import parse_scenario
from usher.engine.state import ClusterState, Job

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import workloads  # bench/ is not a package

NODES = 500
STEPS = 30


def walked_per_cycle(jobs: int) -> tuple[list[int], int]:
    """Jobs the walk reached one by one in each of the first cycles, and how many cycles had a
    reservation to keep."""
    text = workloads.b3_scale(nodes=NODES, jobs=jobs, seed=0)
    # each queue's quota is half the cluster: the cohort's quota binds before the nodes do
    text = text.replace("quota: {gpu: 20000}", f"quota: {{gpu: {NODES * 4}}}")
    ctrl = Controller(parse_scenario(text, file="depth.yaml"))
    walked: list[int] = []
    reserved = 0
    cycle = ctrl.engine.cycle

    def counted(now: float):  # type: ignore[no-untyped-def]
        nonlocal reserved
        result = cycle(now)
        walked.append(result.walked)
        reserved += result.reservation is not None
        return result

    ctrl.engine.cycle = counted  # type: ignore[method-assign]
    for _ in range(STEPS):
        assert ctrl.step()
    return walked[1:], reserved  # the first cycle starts what fits: every job is new to it


def test_a_deeper_backlog_of_the_same_kinds_is_not_walked_job_by_job() -> None:
    shallow, shallow_reserved = walked_per_cycle(2_000)
    deep, deep_reserved = walked_per_cycle(8_000)
    # the cycles kept a reservation on quota: most waiting jobs are held back by it
    assert shallow_reserved > STEPS // 2 and deep_reserved > STEPS // 2
    # before issue 34's fix the walk marked every held-back job one by one: 4x the jobs, 4x
    # the walk (about 16,000 and 64,000 jobs over these cycles); now each (kind, guard) is settled
    # once and the rest is written by reason cell
    assert sum(deep) < 1.5 * sum(shallow), (shallow, deep)


def test_a_kinds_runtime_bounds_follow_the_jobs_still_waiting() -> None:
    """A reason cell's shortest and longest estimated runtimes are those of its pending jobs:
    when the only short job of a kind has started, the reservation's guard holds back all the
    rest, and the cycle needs that one verdict only (before, the bounds only widened, and the
    walk looked for a job that would end in time among jobs of which none would)."""
    text = (
        "name: bounds\n"
        "nodeGroups: [{prefix: n, count: 1, template: {gpus: 8, gpuModel: H100, cpu: 96, memory: 1Ti}}]\n"
        "queues: [{name: a}]\n"
        "jobs:\n"
        "  - {name: short, queue: a, duration: 600, pods: [{count: 1, gpu: 1}]}\n"
        "  - {name: long-1, queue: a, duration: 86400, pods: [{count: 1, gpu: 1}]}\n"
        "  - {name: long-2, queue: a, duration: 90000, pods: [{count: 1, gpu: 1}]}\n"
    )
    ctrl = Controller(parse_scenario(text, file="bounds.yaml"))
    state: ClusterState = ctrl.state
    by_name: dict[str, Job] = {job.name: job for job in state.jobs}
    for job in state.jobs:
        if job._cell is None:
            state.enqueue(job)
    cell = by_name["short"]._cell
    assert cell is not None and cell is by_name["long-1"]._cell
    assert (cell.min_runtime, cell.max_runtime) == (600, 90000)
    state.dequeue(by_name["short"])
    assert (cell.min_runtime, cell.max_runtime) == (86400, 90000)
    state.dequeue(by_name["long-2"])
    assert (cell.min_runtime, cell.max_runtime) == (86400, 86400)
