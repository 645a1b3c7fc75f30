"""The incremental gang cycle decides exactly as the job-by-job one did (issue 14).

Each scenario is replayed twice under each gang policy: once with ``reference_cycle`` (every job
visited, every share and preemption search computed afresh) and once with the engine's own cycle
(kinds settled, queues finished at once, searches remembered across cycles, candidates taken
bucket by bucket). Every decision (who binds where, who is evicted for whom) and every waiting
job's reason after every step must be the same, and so must the report.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from reference_cycle import reference_cycle
from usher.engine import core
from usher.engine.controller import Controller
from usher.engine.policy.registry import POLICIES
from usher.engine.report import build_report
from usher.engine.scenario import parse_scenario

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import workloads  # bench/ is not a package

GANG_POLICIES = [name for name, policy in POLICIES.items() if policy.gang]

SCENARIOS = {
    # a week's shape squeezed into hours at twice what the cluster can do: a deep backlog,
    # rack-required gangs, three priorities, queues that borrow and reclaim by preemption
    "busy": lambda: workloads.b2_busy(nodes=24, jobs=450, days=0.3, seed=3, load=2.0),
    # two days at 1.3x on two blocks of racks: preemption searches that lift many candidates
    "busy-two-blocks": lambda: workloads.b2_busy(nodes=48, jobs=1200, days=2, seed=1, load=1.3),
    # quota binds before capacity does, no preemption configured: whole queues finish at once
    "quota-bound": lambda: workloads.b3_scale(nodes=16, jobs=400, seed=1).replace("quota: {gpu: 20000}", "quota: {gpu: 40}"),
    # the same two with operators at work: holds and releases, a queue that asks for approval
    "busy-operators": lambda: with_operators(
        SCENARIOS["busy"]().replace("name: team-1, cohort: lab,", "name: team-1, cohort: lab, approval: manual,"), 450
    ),
    "quota-bound-operators": lambda: with_operators(
        SCENARIOS["quota-bound"]().replace("{name: b, cohort: c,", "{name: b, cohort: c, approval: manual,"), 400
    ),
}


def with_operators(text: str, jobs: int) -> str:
    """``text`` with holds, releases and approvals spread over its first hours."""
    # each hold a minute or two after its job arrives: held jobs deep in their queues, which
    # the walk often stops short of (they are then marked apart from the reason cells)
    events = [f"  - {{at: {120 + 60 * i}, action: hold, job: j{i}}}" for i in range(0, jobs, 11)]
    events += [f"  - {{at: {9000 + 30 * i}, action: release, job: j{i}}}" for i in range(0, jobs, 46)]
    events += [f"  - {{at: {300 + 20 * i}, action: approve, job: j{i}}}" for i in range(1, jobs, 3)]
    events.sort(key=lambda line: int(line.split("at: ")[1].split(",")[0]))
    return text + "events:\n" + "\n".join(events) + "\n"


def trace(scenario_text: str, policy: str, reference: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], str]:
    """Every step's decisions and waiting reasons, and the final report, of one replay."""
    with monkeypatch.context() as patch:
        if reference:
            patch.setattr(core, "run_cycle", reference_cycle)
        ctrl = Controller(parse_scenario(scenario_text, file="equivalence.yaml"), policy)
        lines: list[str] = []
        apply = ctrl.backend.apply

        def record(decisions, now):  # type: ignore[no-untyped-def]
            for d in decisions:
                where = [(p.pod, p.node_id, tuple(p.gpus), p.share) for p in d.placements]
                lines.append(f"{now} {d.kind} {d.job.name} {where} {d.reason} {d.by}")
            return apply(decisions, now)

        ctrl.backend.apply = record  # type: ignore[method-assign]
        while ctrl.step():
            state = ctrl.state
            waiting = sorted(
                (state.jobs[e[3]].name, str(state.jobs[e[3]].pending_reason), str(state.jobs[e[3]].state))
                for q in state.queues.values()
                for e in q.pending
            )
            lines.append(f"{ctrl.now} waiting {waiting} reservation {state.reservation}")
        return lines, repr(build_report(ctrl))


#: every gang policy on the small scenarios; usher's own on the longer one (a minute otherwise)
#: (scenario, policy, waiting jobs per reason cell from which the cycle marks by cell: None for
#: the engine's own threshold, 0 to do so whenever it can, even on a shallow backlog)
CASES = [(scenario, policy, None) for scenario in ("busy", "quota-bound") for policy in GANG_POLICIES] + [
    ("busy-two-blocks", "usher", None),
    ("busy", "usher", 0),
    ("busy", "kueue", 0),
    ("busy-operators", "usher", 0),
    ("quota-bound-operators", "usher", 0),
    ("quota-bound-operators", "kueue", 0),
]


@pytest.mark.parametrize(("scenario", "policy", "pay_off"), CASES)
def test_incremental_cycle_decides_as_the_job_by_job_cycle(
    scenario: str, policy: str, pay_off: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from usher.engine import cycle

    if pay_off is not None:
        monkeypatch.setattr(cycle, "CELLS_PAY_OFF", pay_off)
    text = SCENARIOS[scenario]()
    expected_lines, expected_report = trace(text, policy, True, monkeypatch)
    got_lines, got_report = trace(text, policy, False, monkeypatch)
    assert len(expected_lines) > 20  # the scenario keeps a backlog for a while
    for i, (want, got) in enumerate(zip(expected_lines, got_lines)):
        assert got == want, f"step {i} differs"
    assert len(got_lines) == len(expected_lines)
    assert got_report == expected_report


@pytest.mark.parametrize(
    ("scenario", "expect"),
    [("busy", "settled"), ("quota-bound", "stable"), ("busy-operators", "apart"), ("quota-bound-operators", "apart")],
)
def test_the_scenarios_exercise_the_fast_paths(scenario: str, expect: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without kinds being settled (and, on the quota-bound backlog, made stable so that queues
    finish at once), without reason cells written for the jobs the walk did not reach (with
    held and unapproved jobs among them, marked apart) and without preemptions, the equivalence
    above would prove little."""
    from usher.engine import cycle

    seen = {"settled": 0, "stable": 0, "cells": 0, "apart": 0}
    settle, write_cells = cycle._GangCycle._settle, cycle._GangCycle._write_cells

    def spy(self, job, plan, guarded, reason):  # type: ignore[no-untyped-def]
        settle(self, job, plan, guarded, reason)
        seen["settled"] += (plan.kind, guarded) in self.settled
        seen["stable"] += plan.kind in self.stable

    def spy_cells(self, needs, reasons, apart):  # type: ignore[no-untyped-def]
        write_cells(self, needs, reasons, apart)
        seen["cells"] += sum(reason is not None for reason in reasons)
        seen["apart"] += len(apart)

    monkeypatch.setattr(cycle._GangCycle, "_settle", spy)
    monkeypatch.setattr(cycle._GangCycle, "_write_cells", spy_cells)
    monkeypatch.setattr(cycle, "CELLS_PAY_OFF", 0)  # as the equivalence cases with pay_off 0
    ctrl = Controller(parse_scenario(SCENARIOS[scenario](), file=f"{scenario}.yaml"))
    ctrl.run_to_end()
    assert seen[expect] > 0
    assert seen["cells"] > 0
    if scenario == "busy":
        assert build_report(ctrl)["summary"]["preemptions"] > 0
