"""Consolidation (issue 15): jobs moved out of a rack so that a gang waiting for one can start.

On ``fixtures/examples/consolidation.yaml``: four nodes in two racks; four long 4-GPU jobs end up
one per node (their short neighbours have ended), so each rack has 8 GPUs free and a 16-GPU gang
that needs one rack waits although 16 GPUs are free. usher moves the two long jobs of one rack
into the other and starts the gang.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from usher.engine.controller import Controller
from usher.engine.enums import AuditAction
from usher.engine.policy.registry import get_policy
from usher.engine.report import build_report
from usher.engine.scenario import parse_scenario

SCATTERED = (Path(__file__).resolve().parents[2] / "fixtures" / "examples" / "consolidation.yaml").read_text()


def _replay(text: str, policy: str = "usher", **changes: object) -> Controller:
    chosen = replace(get_policy(policy), **changes) if changes else policy
    ctrl = Controller(parse_scenario(text, file="scattered.yaml"), chosen)
    while ctrl.step():
        pass
    return ctrl


def _runs(ctrl: Controller) -> dict[str, list]:
    return {job.name: job.runs for job in ctrl.state.jobs}


def _rack_of(ctrl: Controller, node_id: int) -> str:
    return ctrl.state.nodes[node_id].labels["usher/rack"]


def test_the_scattered_jobs_were_one_per_node_before() -> None:
    """The premise: without consolidation the gang waits for a long job to end (10 h)."""
    runs = _runs(_replay(SCATTERED, consolidation=False))
    assert runs["gang"][0].start == 36000.0
    assert all(len(runs[f"long-{i}"]) == 1 for i in range(4))


def test_a_gang_waiting_for_a_rack_starts_once_two_jobs_are_moved() -> None:
    ctrl = _replay(SCATTERED)
    runs = _runs(ctrl)
    gang = runs["gang"][0]
    assert gang.start == 700.0
    gang_racks = {_rack_of(ctrl, p.node_id) for p in gang.placements}
    assert len(gang_racks) == 1
    moved = [name for name in (f"long-{i}" for i in range(4)) if len(runs[name]) == 2]
    assert len(moved) == 2
    for name in moved:
        before, after = runs[name]
        assert before.end == after.start == 700.0  # re-placed at once, never waiting
        assert before.by == "gang"
        assert {_rack_of(ctrl, p.node_id) for p in after.placements} != gang_racks
    # each lost only the 100 s since its last checkpoint at 600 s, and finished 100 s later
    for name in moved:
        assert runs[name][-1].end == 36100.0
    # the audit trail says what moved where, and why
    moves = [e for e in ctrl.state.audit if e.action == AuditAction.MOVE]
    assert sorted(e.target for e in moves) == sorted(moved)
    assert all("so that gang could start in usher/rack=" in e.result and "lost 1m40s of work" in e.result for e in moves), moves
    assert any(e.action == AuditAction.MAKE_ROOM and e.target == "gang" for e in ctrl.state.audit)
    # the report counts the moves, among the preemptions
    summary = build_report(ctrl)["summary"]
    assert summary["moves"] == 2 and summary["preemptions"] == 2


def test_no_move_when_a_moved_job_could_not_start_again_at_once() -> None:
    """A third long job per rack's worth of room is taken: the movers would have nowhere to go."""
    text = SCATTERED.replace(
        "  - {name: gang,",
        "  - {name: blocker, queue: research, submit: 650, duration: 36000, pods: [{count: 1, gpu: 4}]}\n  - {name: gang,",
    )
    runs = _runs(_replay(text))
    assert all(len(runs[f"long-{i}"]) == 1 for i in range(4))
    assert runs["gang"][0].start > 700.0


def test_higher_priority_and_non_preemptible_jobs_are_never_moved() -> None:
    outrank = SCATTERED.replace("queue: research, duration:", "queue: research, priority: high, duration:")
    pinned = SCATTERED.replace("duration: 36000,", "preemptible: false, duration: 36000,")
    for change, text in (("outranking the gang", outrank), ("not preemptible", pinned)):
        runs = _runs(_replay(text))
        assert all(len(runs[f"long-{i}"]) == 1 for i in range(4)), change
        assert runs["gang"][0].start == 36000.0


def test_baselines_never_move_jobs() -> None:
    for policy in ("kueue", "volcano", "slurm"):
        runs = _runs(_replay(SCATTERED, policy))
        assert all(len(runs[f"long-{i}"]) == 1 for i in range(4)), policy
